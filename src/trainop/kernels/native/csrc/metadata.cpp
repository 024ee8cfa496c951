// Bulk reads of tensor metadata for the cached step plan: what a step must know about every
// parameter, gradient and slot before it hands raw pointers to the C kernels, read in one call
// per list (a few nanoseconds per tensor) instead of one Python attribute access per tensor
// and attribute (50-500 ns each). Built on first use against the installed torch (see
// ../metadata.py); without it the same reads run in Python.
//
//   gradients(params, recorded) -> list | None
//       each parameter's .grad, or None if one is missing, not strided, or differs from its
//       parameter in dtype or shape, or a parameter differs in dtype or shape from its entry
//       of `recorded` (tensors of the shape, dtype and device the step plan was built for:
//       a `p.data = t` since then); then the step takes the general, validated path.
//   pointers(lists, address) -> bool
//       the data pointers of every tensor, list after list, written as uint64 at `address`;
//       False (nothing promised about the buffer) if one tensor is not contiguous.
//   sizes(tensors, address) -> None
//       each tensor's number of elements, written as int64 at `address`.
//   plain(lists, types, dtypes, pointers, sizes) -> int
//       the C boundary's per-step pass (../boundary.py): for every tensor of every list, its
//       Python type is exactly one of `types`, it is strided, on the CPU, contiguous and of
//       its list's dtype (`dtypes`: one torch.dtype per list); data pointers and element
//       counts are written list after list as uint64 / int64. Returns 0 (all hold), 1 (a
//       tensor of another type: a subclass), 2 (not contiguous), 3 (not strided or not on
//       the CPU) or 4 (another dtype); the buffers are only complete after 0.
//
// The callers pass plain tensors and nn.Parameters only (no __torch_function__ subclasses);
// a tensor without storage makes gradients() return None and pointers() return False.
#include <Python.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <exception>

namespace {

const at::Tensor* tensor_at(PyObject* list, Py_ssize_t i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (!THPVariable_Check(item)) {
        PyErr_Format(PyExc_TypeError, "expected a list of tensors, got %s at index %zd",
                     Py_TYPE(item)->tp_name, i);
        return nullptr;
    }
    return &THPVariable_Unpack(item);
}

bool is_list(PyObject* object, const char* what) {
    if (PyList_Check(object)) return true;
    PyErr_Format(PyExc_TypeError, "expected %s to be a list, got %s", what,
                 Py_TYPE(object)->tp_name);
    return false;
}

// Parses (list, address) arguments; false with a Python error set otherwise.
bool list_and_address(PyObject* args, const char* what, PyObject** list,
                      unsigned long long* address) {
    return PyArg_ParseTuple(args, "OK", list, address) && is_list(*list, what);
}

PyObject* gradients(PyObject*, PyObject* args) {
    PyObject* params = nullptr;
    PyObject* recorded = nullptr;
    if (!PyArg_ParseTuple(args, "OO", &params, &recorded) || !is_list(params, "params") ||
        !is_list(recorded, "recorded"))
        return nullptr;
    const Py_ssize_t n = PyList_GET_SIZE(params);
    if (PyList_GET_SIZE(recorded) != n) {
        PyErr_SetString(PyExc_ValueError, "expected as many recorded tensors as params");
        return nullptr;
    }
    PyObject* out = PyList_New(n);
    if (out == nullptr) return nullptr;
    try {
        for (Py_ssize_t i = 0; i < n; ++i) {
            const at::Tensor* p = tensor_at(params, i);
            const at::Tensor* r = p == nullptr ? nullptr : tensor_at(recorded, i);
            if (r == nullptr) {
                Py_DECREF(out);
                return nullptr;
            }
            const at::Tensor& g = p->grad();
            if (!g.defined() || g.layout() != c10::kStrided ||
                p->scalar_type() != r->scalar_type() || p->sizes() != r->sizes() ||
                p->device() != r->device() ||
                g.scalar_type() != p->scalar_type() || g.sizes() != p->sizes()) {
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
            PyObject* wrapped = THPVariable_Wrap(g);
            if (wrapped == nullptr) {
                Py_DECREF(out);
                return nullptr;
            }
            PyList_SET_ITEM(out, i, wrapped);
        }
    } catch (const std::exception&) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

PyObject* pointers(PyObject*, PyObject* args) {
    PyObject* lists;
    unsigned long long address;
    if (!list_and_address(args, "lists", &lists, &address)) return nullptr;
    auto* out = reinterpret_cast<uint64_t*>(address);
    Py_ssize_t k = 0;
    try {
        for (Py_ssize_t l = 0; l < PyList_GET_SIZE(lists); ++l) {
            PyObject* list = PyList_GET_ITEM(lists, l);
            if (!is_list(list, "each entry of lists")) return nullptr;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
                const at::Tensor* t = tensor_at(list, i);
                if (t == nullptr) return nullptr;
                if (!t->is_contiguous()) Py_RETURN_FALSE;
                out[k++] = reinterpret_cast<uintptr_t>(t->data_ptr());
            }
        }
    } catch (const std::exception&) {
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyObject* sizes(PyObject*, PyObject* args) {
    PyObject* tensors;
    unsigned long long address;
    if (!list_and_address(args, "tensors", &tensors, &address)) return nullptr;
    auto* out = reinterpret_cast<int64_t*>(address);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tensors); ++i) {
        const at::Tensor* t = tensor_at(tensors, i);
        if (t == nullptr) return nullptr;
        out[i] = t->numel();
    }
    Py_RETURN_NONE;
}

PyObject* plain(PyObject*, PyObject* args) {
    PyObject *lists, *types, *dtypes;
    unsigned long long pointer_address, size_address;
    if (!PyArg_ParseTuple(args, "OO!O!KK", &lists, &PyTuple_Type, &types, &PyTuple_Type,
                          &dtypes, &pointer_address, &size_address) ||
        !is_list(lists, "lists"))
        return nullptr;
    const Py_ssize_t n_lists = PyList_GET_SIZE(lists);
    if (PyTuple_GET_SIZE(dtypes) != n_lists) {
        PyErr_SetString(PyExc_ValueError, "plain(): one dtype per list");
        return nullptr;
    }
    auto* out_pointers = reinterpret_cast<uint64_t*>(pointer_address);
    auto* out_sizes = reinterpret_cast<int64_t*>(size_address);
    const Py_ssize_t n_types = PyTuple_GET_SIZE(types);
    Py_ssize_t k = 0;
    long status = 0;
    try {
        for (Py_ssize_t l = 0; l < n_lists && status == 0; ++l) {
            PyObject* list = PyList_GET_ITEM(lists, l);
            if (!is_list(list, "each entry of lists")) return nullptr;
            PyObject* dtype = PyTuple_GET_ITEM(dtypes, l);
            if (!THPDtype_Check(dtype)) {
                PyErr_SetString(PyExc_TypeError, "plain(): dtypes must be torch.dtype objects");
                return nullptr;
            }
            const auto expected = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i, ++k) {
                PyObject* item = PyList_GET_ITEM(list, i);
                bool known = false;
                for (Py_ssize_t j = 0; j < n_types && !known; ++j)
                    known = reinterpret_cast<PyObject*>(Py_TYPE(item)) ==
                            PyTuple_GET_ITEM(types, j);
                if (!known) { status = 1; break; }
                const at::Tensor& t = THPVariable_Unpack(item);
                if (t.layout() != c10::kStrided || !t.device().is_cpu()) { status = 3; break; }
                if (t.scalar_type() != expected) { status = 4; break; }
                if (!t.is_contiguous()) { status = 2; break; }
                out_pointers[k] = reinterpret_cast<uintptr_t>(t.data_ptr());
                out_sizes[k] = t.numel();
            }
        }
    } catch (const std::exception&) {
        status = 3;  // no storage (e.g. a tensor whose data cannot be read)
    }
    return PyLong_FromLong(status);
}

PyMethodDef methods[] = {
    {"gradients", gradients, METH_VARARGS, "Each parameter's gradient, or None (see the source)."},
    {"pointers", pointers, METH_VARARGS, "Data pointers of contiguous tensors, or False."},
    {"sizes", sizes, METH_VARARGS, "Element counts of tensors."},
    {"plain", plain, METH_VARARGS, "The C boundary's per-step check (see the source)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "trainop_metadata", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_trainop_metadata(void) { return PyModule_Create(&module); }
