// Bulk reads of tensor metadata for the cached step plan: what a step must know about every
// parameter, gradient and slot before it hands raw pointers to the C kernels, read in one call
// per list (a few nanoseconds per tensor) instead of one Python attribute access per tensor
// and attribute (50-500 ns each). Built on first use against the installed torch (see
// ../metadata.py); without it the same reads run in Python.
//
//   gradients(params, record, record_length, types, out) -> (list, bool, bool) | None
//       each parameter's .grad, or None if one is missing, not strided, or differs from its
//       parameter in dtype, shape or device, or a parameter differs from its entry of
//       `record` (int64 at `record`, per parameter: scalar type, device type, device index,
//       number of dimensions, the sizes, the strides, the data pointer: what the step plan
//       was built for; a `p.data = t` since then, even of the same shape); then the step
//       takes the general, validated path.
//       The bool: every parameter and gradient is exactly one of `types`, on the CPU and
//       contiguous; then the C boundary's reads of them are written at `out` as int64
//       (n = len(params)): out[i] the parameter's data pointer, out[n + i] its gradient's,
//       out[2n + i] its element count (the buffer is only complete after True).
//       The second bool: some gradient exactly one of `types` may share its memory with
//       another tensor (as `shared` finds, in the same pass), or some parameter's storage
//       does not own its memory (a gradient's own memory may be that parameter's).
//   record(params) -> list[int]
//       the record `gradients` compares the parameters with (see there), as it is now.
//   pointers(lists, address) -> bool
//       the data pointers of every tensor, list after list, written as uint64 at `address`;
//       False (nothing promised about the buffer) if one tensor is not contiguous.
//   sizes(tensors, address) -> None
//       each tensor's number of elements, written as int64 at `address`.
//   plain(lists, types, dtypes, pointers, sizes[, compare[, device_type, device_index]])
//       -> int
//       the C boundary's per-step pass (../boundary.py): for every tensor of every list, its
//       Python type is exactly one of `types`, it is strided, on the CPU (or on the device
//       `device_type`, `device_index`: c10's DeviceType number and the index, -1 for none:
//       the Triton path's tensors), contiguous and of its list's dtype (`dtypes`: one
//       torch.dtype per list); data pointers and element counts are written list after list
//       as uint64 / int64, or, with `compare` true, compared with what the buffers hold (what
//       the last full check found). Returns 0 (all hold), 1 (a tensor of another type: a
//       subclass), 2 (not contiguous), 3 (not strided or not on the device), 4 (another
//       dtype) or 5 (compare: a pointer or count differs); the written buffers are only
//       complete after 0.
//   rows(tables, indices, values, types) -> bytes | None
//       the tables' data pointers (uint64 each, as the sparse-row kernels take them) where
//       those kernels may run (../boundary.py's checked_rows), else None: every table (a
//       variable and its slots, all written) is exactly one of `types`, strided, on the CPU,
//       contiguous, of the first table's dtype and shape (at least one dimension); `indices`
//       the same, 1-D int64; `values` (or None) the same, of the tables' dtype and shape
//       [len(indices), *the rows' shape]; no table's memory overlaps another table's, the
//       indices' or the values'.
//   like(var, tensors, types) -> bool
//       whether every one of `tensors` (a list) is exactly one of `types`, strided,
//       contiguous, and of `var`'s dtype, device and shape (a step's check of a parameter's
//       slots, where its optimizer's slots are all of that kind; False: the caller's own
//       checks find and name what differs, if anything).
//   first_outside(indices, limit, types) -> int | None
//       the position of the first index outside [0, limit) in `indices` (int64, 1-D or
//       [1, n]: one sparse dimension's row indices), or -1 if every one lies inside; None
//       where it cannot read them (not exactly one of `types`, not a contiguous CPU int64
//       tensor of that shape). One branch-free pass (the range check a step makes of a
//       sparse gradient's rows before anything moves).
//   shared(tensors, types) -> bool
//       whether some tensor of `tensors` (a list) that is exactly one of `types` and strided
//       may share its memory with another tensor: it requires grad (it may be a parameter
//       itself), or its storage is held by another tensor too (use count above one: a view,
//       `p.detach()`), or its storage does not own its memory (`from_numpy`, `from_dlpack`:
//       another storage may hold the same bytes); False where every one has a storage of its
//       own over memory of its own (a gradient autograd made). The step's filter before it compares its gradients with the memory it writes
//       (../../../contract/read_first.py); other tensors are not looked at.
//   extents(tensors, types, address) -> None
//       for each tensor of `tensors` (a list), the byte addresses from its first element to
//       past its last (any strides), two int64 [start, end) per tensor at `address`; [0, 0)
//       for one that is not exactly one of `types`, not strided, on `meta`, or empty (what
//       that comparison sorts and searches).
//
// The callers pass plain tensors and nn.Parameters only (no __torch_function__ subclasses);
// a tensor without storage makes gradients() return None and pointers() return False.
#include <Python.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <exception>
#include <vector>

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

bool one_of(PyObject* object, PyObject* types) {
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(types); ++j)
        if (reinterpret_cast<PyObject*>(Py_TYPE(object)) == PyTuple_GET_ITEM(types, j))
            return true;
    return false;
}

// Prefetching. A pass over thousands of tensors chases pointers (Python object -> TensorImpl
// -> StorageImpl; for a gradient, TensorImpl -> AutogradMeta -> the gradient's TensorImpl ->
// its StorageImpl and Python object), and right after a step's kernels have streamed through
// the tensors' data these objects are no longer in cache: one memory latency per link. The
// passes below ask for the links of the tensors a few places ahead, each link once the one
// before it has arrived (every `kStage` tensors one link further), so the misses of several
// tensors overlap instead of following one another. Prefetches never fault; each link is
// only followed for an object of one of the exact tensor `types`.
constexpr Py_ssize_t kStage = 4;

void prefetch(const void* address, int lines) {
    for (int l = 0; l < lines; ++l)
        __builtin_prefetch(static_cast<const char*>(address) + 64 * l);
}

// The TensorImpl of `list[i]` if it is one of `types` (its Python object already read).
c10::TensorImpl* impl_ahead(PyObject* list, Py_ssize_t i, PyObject* types) {
    if (i >= PyList_GET_SIZE(list)) return nullptr;
    PyObject* item = PyList_GET_ITEM(list, i);
    return one_of(item, types) ? THPVariable_Unpack(item).unsafeGetTensorImpl() : nullptr;
}

// Ahead of tensor `i` of a pass over `list`: its Python objects, TensorImpls and StorageImpls.
void prefetch_tensors(PyObject* list, Py_ssize_t i, PyObject* types) {
    if (i + 3 * kStage < PyList_GET_SIZE(list))
        prefetch(PyList_GET_ITEM(list, i + 3 * kStage), 1);
    if (c10::TensorImpl* impl = impl_ahead(list, i + 2 * kStage, types)) prefetch(impl, 4);
    if (c10::TensorImpl* impl = impl_ahead(list, i + kStage, types))
        prefetch(impl->unsafe_storage().unsafeGetStorageImpl(), 2);
}

// Ahead of parameter `i` of the gradient pass: the above for the parameters, then each one's
// AutogradMeta, its gradient's TensorImpl, and that one's StorageImpl.
void prefetch_gradients(PyObject* params, Py_ssize_t i, PyObject* types) {
    if (i + 5 * kStage < PyList_GET_SIZE(params))
        prefetch(PyList_GET_ITEM(params, i + 5 * kStage), 1);
    if (c10::TensorImpl* impl = impl_ahead(params, i + 4 * kStage, types)) prefetch(impl, 4);
    if (c10::TensorImpl* impl = impl_ahead(params, i + 3 * kStage, types)) {
        prefetch(impl->unsafe_storage().unsafeGetStorageImpl(), 2);
        if (c10::AutogradMetaInterface* meta = impl->autograd_meta()) prefetch(meta, 4);
    }
    if (c10::TensorImpl* impl = impl_ahead(params, i + 2 * kStage, types)) {
        if (c10::AutogradMetaInterface* meta = impl->autograd_meta())
            if (c10::TensorImpl* grad = meta->grad().unsafeGetTensorImpl()) prefetch(grad, 4);
    }
    if (c10::TensorImpl* impl = impl_ahead(params, i + kStage, types)) {
        if (c10::AutogradMetaInterface* meta = impl->autograd_meta()) {
            if (c10::TensorImpl* grad = meta->grad().unsafeGetTensorImpl())
                prefetch(grad->unsafe_storage().unsafeGetStorageImpl(), 2);
        }
    }
}

// Whether `p` is as its entry of the plan's record says (advancing `entry` past it); false
// also where the record ends early.
bool as_recorded(const at::Tensor& p, const int64_t*& entry, const int64_t* end) {
    if (end - entry < 5) return false;
    const int64_t dims = entry[3];
    if (dims < 0 || end - entry < 5 + 2 * dims) return false;
    const c10::Device device = p.device();
    if (static_cast<int64_t>(p.scalar_type()) != entry[0] ||
        static_cast<int64_t>(device.type()) != entry[1] || device.index() != entry[2] ||
        p.dim() != dims)
        return false;
    const auto sizes = p.sizes();
    const auto strides = p.strides();
    for (int64_t d = 0; d < dims; ++d)
        if (sizes[d] != entry[4 + d] || strides[d] != entry[4 + dims + d]) return false;
    if (static_cast<int64_t>(reinterpret_cast<uintptr_t>(p.data_ptr())) != entry[4 + 2 * dims])
        return false;
    entry += 5 + 2 * dims;
    return true;
}

// Whether strided `t`'s storage holds memory that another storage may also hold: memory it
// does not own as an allocation of its own (its context is not its data: `from_numpy`,
// `from_dlpack`, `from_blob`, shared or mapped memory), which another tensor's storage (a
// parameter's, a slot's) may hold too.
bool borrowed(const at::Tensor& t) {
    const c10::DataPtr& data = t.storage().data_ptr();
    return data.get_context() != data.get();
}

// Whether strided `t` may share its memory with another tensor (see `shared`).
bool may_share(const at::Tensor& t) {
    return t.requires_grad() || t.storage().use_count() != 1 || borrowed(t);
}

PyObject* gradients(PyObject*, PyObject* args) {
    PyObject *params, *types;
    unsigned long long record_address, out_address;
    Py_ssize_t record_length;
    if (!PyArg_ParseTuple(args, "OKnO!K", &params, &record_address, &record_length,
                          &PyTuple_Type, &types, &out_address) ||
        !is_list(params, "params"))
        return nullptr;
    const Py_ssize_t n = PyList_GET_SIZE(params);
    const auto* entry = reinterpret_cast<const int64_t*>(record_address);
    const int64_t* end = entry + record_length;
    auto* out = reinterpret_cast<int64_t*>(out_address);
    PyObject* grads = PyList_New(n);
    if (grads == nullptr) return nullptr;
    bool ready = true;
    bool maybe_shared = false;
    try {
        for (Py_ssize_t i = 0; i < n; ++i) {
            prefetch_gradients(params, i, types);
            PyObject* item = PyList_GET_ITEM(params, i);
            const at::Tensor* p = tensor_at(params, i);
            if (p == nullptr) {
                Py_DECREF(grads);
                return nullptr;
            }
            const at::Tensor& g = p->grad();
            if (!as_recorded(*p, entry, end) || !g.defined() || g.layout() != c10::kStrided ||
                g.scalar_type() != p->scalar_type() || g.sizes() != p->sizes() ||
                g.device() != p->device()) {
                Py_DECREF(grads);
                Py_RETURN_NONE;
            }
            PyObject* wrapped = THPVariable_Wrap(g);
            if (wrapped == nullptr) {
                Py_DECREF(grads);
                return nullptr;
            }
            PyList_SET_ITEM(grads, i, wrapped);
            const bool plain_grad = one_of(wrapped, types);
            // a parameter in borrowed memory may be the memory of a gradient that owns it
            maybe_shared = maybe_shared || (plain_grad && (may_share(g) || borrowed(*p)));
            ready = ready && one_of(item, types) && plain_grad &&
                    p->layout() == c10::kStrided && p->device().is_cpu() &&
                    p->is_contiguous() && g.is_contiguous();
            if (ready) {
                out[i] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p->data_ptr()));
                out[n + i] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(g.data_ptr()));
                out[2 * n + i] = p->numel();
            }
        }
    } catch (const std::exception&) {
        Py_DECREF(grads);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NOO)", grads, ready ? Py_True : Py_False,
                         maybe_shared ? Py_True : Py_False);
}

PyObject* record(PyObject*, PyObject* args) {
    PyObject* params;
    if (!PyArg_ParseTuple(args, "O", &params) || !is_list(params, "params")) return nullptr;
    PyObject* out = PyList_New(0);
    if (out == nullptr) return nullptr;
    auto append = [out](int64_t value) {
        PyObject* item = PyLong_FromLongLong(value);
        if (item == nullptr) return false;
        const int failed = PyList_Append(out, item);
        Py_DECREF(item);
        return failed == 0;
    };
    try {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(params); ++i) {
            const at::Tensor* p = tensor_at(params, i);
            if (p == nullptr) {
                Py_DECREF(out);
                return nullptr;
            }
            const c10::Device device = p->device();
            bool ok = append(static_cast<int64_t>(p->scalar_type())) &&
                      append(static_cast<int64_t>(device.type())) &&
                      append(device.index()) && append(p->dim());
            for (const int64_t size : p->sizes()) ok = ok && append(size);
            for (const int64_t stride : p->strides()) ok = ok && append(stride);
            ok = ok && append(static_cast<int64_t>(reinterpret_cast<uintptr_t>(p->data_ptr())));
            if (!ok) {
                Py_DECREF(out);
                return nullptr;
            }
        }
    } catch (const std::exception&) {
        // sizes that cannot be read (e.g. a nested tensor): an empty record, which no
        // parameter matches, so every step takes the general path
        Py_DECREF(out);
        return PyList_New(0);
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
    int compare = 0, device_type = static_cast<int>(c10::DeviceType::CPU), device_index = -1;
    if (!PyArg_ParseTuple(args, "OO!O!KK|pii", &lists, &PyTuple_Type, &types, &PyTuple_Type,
                          &dtypes, &pointer_address, &size_address, &compare, &device_type,
                          &device_index) ||
        !is_list(lists, "lists"))
        return nullptr;
    const Py_ssize_t n_lists = PyList_GET_SIZE(lists);
    if (PyTuple_GET_SIZE(dtypes) != n_lists) {
        PyErr_SetString(PyExc_ValueError, "plain(): one dtype per list");
        return nullptr;
    }
    auto* out_pointers = reinterpret_cast<uint64_t*>(pointer_address);
    auto* out_sizes = reinterpret_cast<int64_t*>(size_address);
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
                prefetch_tensors(list, i, types);
                PyObject* item = PyList_GET_ITEM(list, i);
                if (!one_of(item, types)) { status = 1; break; }
                const at::Tensor& t = THPVariable_Unpack(item);
                if (t.layout() != c10::kStrided ||
                    static_cast<int>(t.device().type()) != device_type ||
                    t.device().index() != device_index) {
                    status = 3;
                    break;
                }
                if (t.scalar_type() != expected) { status = 4; break; }
                if (!t.is_contiguous()) { status = 2; break; }
                const auto pointer = static_cast<uint64_t>(
                    reinterpret_cast<uintptr_t>(t.data_ptr()));
                if (compare) {
                    if (out_pointers[k] != pointer || out_sizes[k] != t.numel()) {
                        status = 5;
                        break;
                    }
                } else {
                    out_pointers[k] = pointer;
                    out_sizes[k] = t.numel();
                }
            }
        }
    } catch (const std::exception&) {
        status = 3;  // no storage (e.g. a tensor whose data cannot be read)
    }
    return PyLong_FromLong(status);
}

// A plain (exactly one of `types`), strided, contiguous CPU tensor: what C may read as one
// block; nullptr otherwise.
const at::Tensor* plain_block(PyObject* object, PyObject* types) {
    if (!one_of(object, types)) return nullptr;
    const at::Tensor& t = THPVariable_Unpack(object);
    if (t.layout() != c10::kStrided || !t.device().is_cpu() || !t.is_contiguous())
        return nullptr;
    return &t;
}

struct Span {
    uintptr_t start, end;
    bool overlaps(const Span& other) const {
        return start < end && other.start < other.end && start < other.end &&
               other.start < end;
    }
};

Span span_of(const at::Tensor& t) {
    const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
    return {start, start + static_cast<uintptr_t>(t.numel()) * t.element_size()};
}

PyObject* rows(PyObject*, PyObject* args) {
    PyObject *tables, *indices_object, *values_object, *types;
    if (!PyArg_ParseTuple(args, "OOOO!", &tables, &indices_object, &values_object,
                          &PyTuple_Type, &types) ||
        !is_list(tables, "tables"))
        return nullptr;
    const Py_ssize_t n = PyList_GET_SIZE(tables);
    if (n == 0) Py_RETURN_NONE;
    std::vector<uint64_t> pointers;
    pointers.reserve(n);
    try {
        const at::Tensor* var = plain_block(PyList_GET_ITEM(tables, 0), types);
        const at::Tensor* indices = plain_block(indices_object, types);
        if (var == nullptr || indices == nullptr || var->dim() == 0 || indices->dim() != 1 ||
            indices->scalar_type() != at::kLong)
            Py_RETURN_NONE;
        const auto shape = var->sizes();
        Span extra[2] = {span_of(*indices), {0, 0}};
        if (values_object != Py_None) {
            const at::Tensor* values = plain_block(values_object, types);
            if (values == nullptr || values->scalar_type() != var->scalar_type() ||
                values->dim() != var->dim() || values->size(0) != indices->numel() ||
                values->sizes().slice(1) != shape.slice(1))
                Py_RETURN_NONE;
            extra[1] = span_of(*values);
        }
        std::vector<Span> written;
        written.reserve(n);
        for (Py_ssize_t i = 0; i < n; ++i) {
            const at::Tensor* table = plain_block(PyList_GET_ITEM(tables, i), types);
            if (table == nullptr || table->scalar_type() != var->scalar_type() ||
                table->sizes() != shape)
                Py_RETURN_NONE;
            const Span span = span_of(*table);
            for (const Span& other : written)
                if (span.overlaps(other)) Py_RETURN_NONE;
            for (const Span& other : extra)
                if (span.overlaps(other)) Py_RETURN_NONE;
            written.push_back(span);
            pointers.push_back(span.start);
        }
    } catch (const std::exception&) {
        Py_RETURN_NONE;  // a tensor whose data cannot be read
    }
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(pointers.data()),
                                     static_cast<Py_ssize_t>(pointers.size() * 8));
}

PyObject* like(PyObject*, PyObject* args) {
    PyObject *var_object, *tensors, *types;
    if (!PyArg_ParseTuple(args, "OOO!", &var_object, &tensors, &PyTuple_Type, &types) ||
        !is_list(tensors, "tensors"))
        return nullptr;
    if (!THPVariable_Check(var_object)) {
        PyErr_Format(PyExc_TypeError, "expected var to be a tensor, got %s",
                     Py_TYPE(var_object)->tp_name);
        return nullptr;
    }
    try {
        const at::Tensor& var = THPVariable_Unpack(var_object);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tensors); ++i) {
            PyObject* item = PyList_GET_ITEM(tensors, i);
            if (!one_of(item, types)) Py_RETURN_FALSE;
            const at::Tensor& t = THPVariable_Unpack(item);
            if (t.layout() != c10::kStrided || !t.is_contiguous() ||
                t.scalar_type() != var.scalar_type() || t.device() != var.device() ||
                t.sizes() != var.sizes())
                Py_RETURN_FALSE;
        }
    } catch (const std::exception&) {
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyObject* first_outside(PyObject*, PyObject* args) {
    PyObject *object, *types;
    long long limit;
    if (!PyArg_ParseTuple(args, "OLO!", &object, &limit, &PyTuple_Type, &types)) return nullptr;
    int64_t n = 0;
    const int64_t* indices = nullptr;
    try {
        const at::Tensor* t = plain_block(object, types);
        if (t == nullptr || t->scalar_type() != at::kLong || t->dim() < 1 || t->dim() > 2 ||
            (t->dim() == 2 && t->size(0) != 1))
            Py_RETURN_NONE;
        n = t->numel();
        indices = n > 0 ? t->const_data_ptr<int64_t>() : nullptr;
    } catch (const std::exception&) {
        Py_RETURN_NONE;
    }
    const auto bound = static_cast<uint64_t>(limit < 0 ? 0 : limit);  // negative: huge
    bool outside = false;
    for (int64_t k = 0; k < n; ++k) outside |= static_cast<uint64_t>(indices[k]) >= bound;
    int64_t first = -1;
    for (int64_t k = 0; outside && k < n; ++k) {
        if (static_cast<uint64_t>(indices[k]) >= bound) {
            first = k;
            break;
        }
    }
    return PyLong_FromLongLong(first);
}

PyObject* shared(PyObject*, PyObject* args) {
    PyObject *tensors, *types;
    if (!PyArg_ParseTuple(args, "OO!", &tensors, &PyTuple_Type, &types) ||
        !is_list(tensors, "tensors"))
        return nullptr;
    try {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tensors); ++i) {
            prefetch_tensors(tensors, i, types);
            PyObject* item = PyList_GET_ITEM(tensors, i);
            if (!one_of(item, types)) continue;
            const at::Tensor& t = THPVariable_Unpack(item);
            if (t.layout() != c10::kStrided) continue;
            if (may_share(t)) Py_RETURN_TRUE;
        }
    } catch (const std::exception&) {
        Py_RETURN_TRUE;  // a storage that cannot be read: the caller's exact check decides
    }
    Py_RETURN_FALSE;
}

PyObject* extents(PyObject*, PyObject* args) {
    PyObject *tensors, *types;
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "OO!K", &tensors, &PyTuple_Type, &types, &address) ||
        !is_list(tensors, "tensors"))
        return nullptr;
    auto* out = reinterpret_cast<int64_t*>(address);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tensors); ++i) {
        prefetch_tensors(tensors, i, types);
        const at::Tensor* t = tensor_at(tensors, i);
        if (t == nullptr) return nullptr;
        int64_t start = 0, end = 0;
        try {
            if (one_of(PyList_GET_ITEM(tensors, i), types) && t->layout() == c10::kStrided &&
                !t->is_meta() && t->numel() > 0) {
                const auto sizes = t->sizes();
                const auto strides = t->strides();
                int64_t low = 0, span = 1;
                for (size_t d = 0; d < sizes.size(); ++d) {
                    const int64_t reach = (sizes[d] - 1) * strides[d];
                    low += reach < 0 ? reach : 0;
                    span += reach < 0 ? -reach : reach;
                }
                const int64_t size = static_cast<int64_t>(t->element_size());
                start = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t->data_ptr())) +
                        low * size;
                end = start + span * size;
            }
        } catch (const std::exception&) {
            start = end = 0;
        }
        out[2 * i] = start;
        out[2 * i + 1] = end;
    }
    Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"gradients", gradients, METH_VARARGS, "Each parameter's gradient, or None (see the source)."},
    {"record", record, METH_VARARGS, "The record gradients() compares parameters with."},
    {"pointers", pointers, METH_VARARGS, "Data pointers of contiguous tensors, or False."},
    {"sizes", sizes, METH_VARARGS, "Element counts of tensors."},
    {"plain", plain, METH_VARARGS, "The C boundary's per-step check (see the source)."},
    {"rows", rows, METH_VARARGS, "Whether the sparse-row kernels may run (see the source)."},
    {"first_outside", first_outside, METH_VARARGS, "The first index out of range, or -1."},
    {"like", like, METH_VARARGS, "Whether tensors are of var's kind (see the source)."},
    {"shared", shared, METH_VARARGS, "Whether a tensor may share memory (see the source)."},
    {"extents", extents, METH_VARARGS, "Byte ranges of tensors (see the source)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "trainop_metadata", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit_trainop_metadata(void) { return PyModule_Create(&module); }
