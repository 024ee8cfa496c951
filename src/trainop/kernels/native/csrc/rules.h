/* The update rules as loops over one contiguous chunk, in TF's kernel order (the same order
 * as the Python reference in trainop/algorithms). Included once per element type by driver.c,
 * with `real`, SFX(name), SQRT, POW and SUFFIX defined.
 *
 * Each range function gets p[0] = variable, p[1] = gradient, p[2...] = slots, the chunk's
 * length n, the hyperparameters and the gradient multiplier (1 when there is none;
 * multiplying by 1 is exact). Scalars are cast to `real` once, as torch casts a Python
 * scalar to the tensor's type.
 */
#define EXPORT_(rule, suffix, n_lists) EXPORT_ELEMENTWISE(rule, suffix, real, n_lists)
#define EXPORT(rule, n_lists) EXPORT_(rule, SUFFIX, n_lists)
#define RANGE(rule)                                                                           \
    static void SFX(rule)(char **p, int64_t n, const double *hyper, double multiplier,       \
                          const void *per_tensor, int64_t tensor)
#define UNUSED_RANGE_ARGS (void)per_tensor; (void)tensor
#define VAR ((real *restrict)p[0])
#define GRAD ((const real *restrict)p[1])
#define SLOT(k) ((real *restrict)p[2 + (k)])

/* torch.sign: 0 for zero and NaN. */
static inline real SFX(sign)(real x) { return (real)((x > 0) - (x < 0)); }
/* clamp(min=0) that lets NaN through, as torch's clamp does. */
static inline real SFX(relu)(real x) { return x < 0 ? (real)0 : x; }

/* Gradient descent. hyper: lr.  var -= g*lr */
RANGE(gradient_descent) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    const real lr = (real)hyper[0], mult = (real)multiplier;
    for (int64_t i = 0; i < n; ++i) var[i] -= grad[i] * mult * lr;
}
EXPORT(gradient_descent, 2)

/* Adagrad (no epsilon). hyper: lr.  accum += g*g; var -= g*lr*rsqrt(accum) */
RANGE(adagrad) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD; real *restrict accum = SLOT(0);
    const real lr = (real)hyper[0], mult = (real)multiplier;
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        const real a = accum[i] + g * g;
        accum[i] = a;
        var[i] -= g * lr * ((real)1 / SQRT(a));
    }
}
EXPORT(adagrad, 3)

/* AdagradDA. hyper: lr, l1, l2, t (= global_step + 1).
 *   ga += g; gga += g*g; denom = sqrt(gga) + l2*t*lr
 *   var = sign(ga) * max(|ga| - l1*t, 0) * (-lr) / denom   (l1 > 0)
 *   var = ga * lr * (-1) / denom                           (l1 = 0) */
RANGE(adagrad_da) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    real *restrict ga = SLOT(0); real *restrict gga = SLOT(1);
    const real lr = (real)hyper[0], l1 = (real)hyper[1], l2 = (real)hyper[2];
    const real t = (real)hyper[3], mult = (real)multiplier;
    const real l2_term = l2 * t * lr, l1_t = l1 * t, neg_lr = -lr;
    const int shrink = l1 > 0;  /* loop-invariant: the compiler splits the loop on it */
    if (lr == (real)0) {  /* lr = 0: the accumulators advance, var keeps its value */
        for (int64_t i = 0; i < n; ++i) {
            const real g = grad[i] * mult;
            ga[i] = ga[i] + g; gga[i] = gga[i] + g * g;
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        const real a = ga[i] + g, s = gga[i] + g * g;
        ga[i] = a; gga[i] = s;
        const real denom = SQRT(s) + l2_term;
        var[i] = shrink ? SFX(sign)(a) * SFX(relu)(FABS(a) - l1_t) * neg_lr / denom
                        : a * lr * (real)-1 / denom;
    }
}
EXPORT(adagrad_da, 4)

/* Adadelta. hyper: lr, rho, epsilon.
 *   accum = accum*rho + g*g*(1-rho); update = sqrt(accum_update+eps) * rsqrt(accum+eps) * g
 *   var -= update*lr; accum_update = accum_update*rho + update*update*(1-rho) */
RANGE(adadelta) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    real *restrict accum = SLOT(0); real *restrict accum_update = SLOT(1);
    const real lr = (real)hyper[0], rho = (real)hyper[1], eps = (real)hyper[2];
    const real one_minus_rho = (real)(1.0 - hyper[1]), mult = (real)multiplier;
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        const real a = accum[i] * rho + g * g * one_minus_rho;
        accum[i] = a;
        const real update = SQRT(accum_update[i] + eps) * ((real)1 / SQRT(a + eps)) * g;
        var[i] -= update * lr;
        accum_update[i] = accum_update[i] * rho + update * update * one_minus_rho;
    }
}
EXPORT(adadelta, 4)

/* RMSProp (TF's dense kernel form). hyper: lr, decay, momentum, epsilon.
 *   ms += (g*g - ms)*(1-decay); mom = mom*momentum + g*lr/sqrt(ms + eps); var -= mom */
RANGE(rmsprop) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    real *restrict ms = SLOT(0); real *restrict mom = SLOT(1);
    const real lr = (real)hyper[0], momentum = (real)hyper[2], eps = (real)hyper[3];
    const real one_minus_decay = (real)(1.0 - hyper[1]), mult = (real)multiplier;
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        const real s = ms[i] + (g * g - ms[i]) * one_minus_decay;
        ms[i] = s;
        const real m = mom[i] * momentum + g * lr / SQRT(s + eps);
        mom[i] = m;
        var[i] -= m;
    }
}
EXPORT(rmsprop, 4)

/* Centered RMSProp. Slots: ms, mg, mom.
 *   mg += (g - mg)*(1-decay); denominator sqrt(ms - mg*mg + eps) */
RANGE(rmsprop_centered) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    real *restrict ms = SLOT(0); real *restrict mg = SLOT(1); real *restrict mom = SLOT(2);
    const real lr = (real)hyper[0], momentum = (real)hyper[2], eps = (real)hyper[3];
    const real one_minus_decay = (real)(1.0 - hyper[1]), mult = (real)multiplier;
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        const real s = ms[i] + (g * g - ms[i]) * one_minus_decay;
        const real c = mg[i] + (g - mg[i]) * one_minus_decay;
        ms[i] = s; mg[i] = c;
        const real m = mom[i] * momentum + g * lr / SQRT(s - c * c + eps);
        mom[i] = m;
        var[i] -= m;
    }
}
EXPORT(rmsprop_centered, 5)

/* RMSProp in the form of TF's sparse kernels (SparseApplyRMSProp, SparseApplyCenteredRMSProp),
 * equal to the dense form up to rounding. Slots: ms, mom (centered: ms, mg, mom).
 *   ms = ms*decay + g*g*(1-decay); centered: mg = mg*decay + g*(1-decay),
 *   denominator sqrt(ms + eps - mg*mg), else sqrt(ms + eps); then as the dense form */
#define RMSPROP_SPARSE_LOOP(CENTERED)                                                         \
    for (int64_t i = 0; i < n; ++i) {                                                         \
        const real g = grad[i] * mult;                                                        \
        const real s = ms[i] * decay + g * g * one_minus_decay;                               \
        ms[i] = s;                                                                            \
        real d = s + eps;                                                                     \
        if (CENTERED) {                                                                       \
            const real c = mg[i] * decay + g * one_minus_decay;                               \
            mg[i] = c;                                                                        \
            d = d - c * c;                                                                    \
        }                                                                                     \
        const real m = mom[i] * momentum + g * lr / SQRT(d);                                  \
        mom[i] = m;                                                                           \
        var[i] -= m;                                                                          \
    }
#define RMSPROP_SPARSE_CONSTANTS                                                              \
    real *restrict var = VAR; const real *restrict grad = GRAD;                               \
    const real lr = (real)hyper[0], decay = (real)hyper[1], momentum = (real)hyper[2];        \
    const real eps = (real)hyper[3], one_minus_decay = (real)(1.0 - hyper[1]);                \
    const real mult = (real)multiplier
RANGE(rmsprop_sparse) {
    UNUSED_RANGE_ARGS;
    RMSPROP_SPARSE_CONSTANTS;
    real *restrict ms = SLOT(0); real *restrict mom = SLOT(1); real *restrict mg = NULL;
    RMSPROP_SPARSE_LOOP(0)
}
RANGE(rmsprop_centered_sparse) {
    UNUSED_RANGE_ARGS;
    RMSPROP_SPARSE_CONSTANTS;
    real *restrict ms = SLOT(0); real *restrict mg = SLOT(1); real *restrict mom = SLOT(2);
    RMSPROP_SPARSE_LOOP(1)
}
#undef RMSPROP_SPARSE_LOOP
#undef RMSPROP_SPARSE_CONSTANTS

/* FTRL-Proximal. hyper: lr, lr_power, l1, l2, l2_shrinkage. P(x) = x^(-lr_power), sqrt for
 * lr_power = -0.5.
 *   gs = g + var*(2*shrinkage) (shrinkage > 0); new = accum + g*g
 *   linear += gs - (P(new) - P(accum))/lr * var; quad = P(new)/lr + 2*l2
 *   var = |linear| > l1 ? (sign(linear)*l1 - linear)/quad : 0; accum = new */
#define FTRL_LOOP(POWER)                                                                      \
    for (int64_t i = 0; i < n; ++i) {                                                         \
        const real g = grad[i] * mult, v = var[i], a = accum[i];                              \
        const real shrunk_g = g + v * two_shrink;                                             \
        const real gs = shrink > 0 ? shrunk_g : g;                                            \
        const real na = a + g * g;                                                            \
        const real p_new = POWER(na), p_old = POWER(a);                                       \
        const real l = linear[i] + (gs - (p_new - p_old) / lr * v);                          \
        linear[i] = l;                                                                        \
        const real quad = p_new / lr + two_l2;                                                \
        const real moved = (SFX(sign)(l) * l1 - l) / quad;                                    \
        var[i] = FABS(l) > l1 ? moved : (real)0;                                              \
        accum[i] = na;                                                                        \
    }
#define FTRL_SQRT(x) SQRT(x)
#define FTRL_POW(x) POW((x), neg_power)
RANGE(ftrl) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    real *restrict accum = SLOT(0); real *restrict linear = SLOT(1);
    const real lr = (real)hyper[0], neg_power = (real)-hyper[1], l1 = (real)hyper[2];
    const real two_l2 = (real)2 * (real)hyper[3], shrink = (real)hyper[4];
    const real two_shrink = (real)(2 * hyper[4]), mult = (real)multiplier;
    if (lr == (real)0) return;  /* lr = 0: linear's update divides by lr; nothing changes */
    if (hyper[1] == -0.5) {
        FTRL_LOOP(FTRL_SQRT)
    } else {
        FTRL_LOOP(FTRL_POW)
    }
}
EXPORT(ftrl, 4)

/* The proximal step with step size s (a scalar or per element):
 *   prox = var - g*s; var = sign(prox)*max(|prox| - s*l1, 0)/(s*l2 + 1)  (l1 > 0)
 *                     var = prox/(s*l2 + 1)                              (l1 = 0) */
static inline real SFX(proximal)(real v, real g, real s, real s_l1, real s_l2_plus_one,
                                 int shrink) {
    const real prox = v - g * s;
    if (shrink) return SFX(sign)(prox) * SFX(relu)(FABS(prox) - s_l1) / s_l2_plus_one;
    return prox / s_l2_plus_one;
}

/* Proximal gradient descent. hyper: lr, l1, l2 (lr*l1 and lr*l2 + 1 in double, as the
 * reference computes them from Python floats). */
RANGE(proximal_gd) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    const real lr = (real)hyper[0], s_l1 = (real)(hyper[0] * hyper[1]);
    const real s_l2 = (real)(hyper[0] * hyper[2] + 1), mult = (real)multiplier;
    const int shrink = hyper[1] > 0;
    if (shrink) {
        for (int64_t i = 0; i < n; ++i)
            var[i] = SFX(proximal)(var[i], grad[i] * mult, lr, s_l1, s_l2, 1);
    } else {
        for (int64_t i = 0; i < n; ++i)
            var[i] = SFX(proximal)(var[i], grad[i] * mult, lr, s_l1, s_l2, 0);
    }
}
EXPORT(proximal_gd, 2)

/* Proximal Adagrad. hyper: lr, l1, l2. accum += g*g; s = rsqrt(accum)*lr; then the proximal
 * step with s. */
RANGE(proximal_adagrad) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD; real *restrict accum = SLOT(0);
    const real lr = (real)hyper[0], l1 = (real)hyper[1], l2 = (real)hyper[2];
    const real mult = (real)multiplier;
    const int shrink = hyper[1] > 0;
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        const real a = accum[i] + g * g;
        accum[i] = a;
        const real s = (real)1 / SQRT(a) * lr;
        var[i] = SFX(proximal)(var[i], g, s, s * l1, s * l2 + (real)1, shrink);
    }
}
EXPORT(proximal_adagrad, 3)

/* Momentum with optional decoupled weight decay (contrib's MomentumW decays first).
 * hyper: lr, momentum, use_nesterov, weight_decay.
 *   var -= var*wd (wd > 0); accum = accum*momentum + g
 *   var -= accum*lr  |  var -= g*lr + accum*momentum*lr  (Nesterov) */
RANGE(momentum) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD; real *restrict accum = SLOT(0);
    const real lr = (real)hyper[0], momentum = (real)hyper[1], wd = (real)hyper[3];
    const int nesterov = hyper[2] != 0, decay = hyper[3] != 0;
    const real mult = (real)multiplier;
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        real v = var[i];
        if (decay) v = v - v * wd;
        const real a = accum[i] * momentum + g;
        accum[i] = a;
        var[i] = nesterov ? v - (g * lr + a * momentum * lr) : v - a * lr;
    }
}
EXPORT(momentum, 3)

/* Adam / Nadam with optional decoupled weight decay (contrib's AdamW decays first).
 * hyper: alpha (TF's step size at this step), beta1, beta2, epsilon, use_nesterov, wd.
 *   m += (g - m)*(1-beta1); v += (g*g - v)*(1-beta2)
 *   var -= num*alpha/(sqrt(v) + eps), num = m  |  g*(1-beta1) + m*beta1  (Nadam) */
RANGE(adam) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    real *restrict m = SLOT(0); real *restrict v = SLOT(1);
    const real alpha = (real)hyper[0], beta1 = (real)hyper[1], eps = (real)hyper[3];
    const real one_minus_beta1 = (real)(1.0 - hyper[1]);
    const real one_minus_beta2 = (real)(1.0 - hyper[2]), wd = (real)hyper[5];
    const int nesterov = hyper[4] != 0, decay = hyper[5] != 0;
    const real mult = (real)multiplier;
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        real x = var[i];
        if (decay) x = x - x * wd;
        const real mi = m[i] + (g - m[i]) * one_minus_beta1;
        const real vi = v[i] + (g * g - v[i]) * one_minus_beta2;
        m[i] = mi; v[i] = vi;
        const real num = nesterov ? g * one_minus_beta1 + mi * beta1 : mi;
        var[i] = x - num * alpha / (SQRT(vi) + eps);
    }
}
EXPORT(adam, 4)

/* Adam's variable update alone, for TF's sparse Adam (the moments of every row were decayed
 * and the touched rows accumulated before). Lists: var, m, v. hyper: alpha, epsilon.
 *   var -= alpha*m/(sqrt(v) + eps) */
RANGE(adam_apply) {
    UNUSED_RANGE_ARGS;
    (void)multiplier;
    real *restrict var = VAR;
    const real *restrict m = (const real *restrict)p[1], *restrict v = SLOT(0);
    const real alpha = (real)hyper[0], eps = (real)hyper[1];
    for (int64_t i = 0; i < n; ++i) var[i] -= alpha * m[i] / (SQRT(v[i]) + eps);
}
EXPORT(adam_apply, 3)

/* NovoGrad's elementwise part; per_tensor holds each tensor's denominator (float32).
 * hyper: lr, beta1, beta2, epsilon, weight_decay, grad_averaging, persistent.
 *   d = g/denominator (+ var*wd) (* (1-beta1)); m = m*beta1 + d; var -= m*lr */
RANGE(novograd_update) {
    real *restrict var = VAR; const real *restrict grad = GRAD; real *restrict mom = SLOT(0);
    const real lr = (real)hyper[0], beta1 = (real)hyper[1], wd = (real)hyper[4];
    const real one_minus_beta1 = (real)(1.0 - hyper[1]), mult = (real)multiplier;
    const int decay = hyper[4] > 0, averaging = hyper[5] != 0;
    const real denominator = (real)((const float *)per_tensor)[tensor];
    for (int64_t i = 0; i < n; ++i) {
        real d = grad[i] * mult / denominator;
        if (decay) d = d + var[i] * wd;
        if (averaging) d = d * one_minus_beta1;
        const real mi = mom[i] * beta1 + d;
        mom[i] = mi;
        var[i] -= mi * lr;
    }
}

/* Sum of squares of float32(g*mult) over a chunk, accumulated in double over 16 lanes (a fixed
 * order, so the result does not depend on the thread count; the lanes let it vectorise). */
#define LANES 16
RANGE(square_sum) {
    const real *restrict grad = (const real *)p[0];
    const real mult = (real)multiplier;
    double lanes[LANES] = {0}, sum = 0;
    int64_t i = 0;
    (void)hyper;
    for (; i + LANES <= n; i += LANES) {
        for (int j = 0; j < LANES; ++j) {
            const float g = (float)(grad[i + j] * mult);
            lanes[j] += (double)g * (double)g;
        }
    }
    for (; i < n; ++i) {
        const float g = (float)(grad[i] * mult);
        sum += (double)g * (double)g;
    }
    for (int j = 0; j < LANES; ++j) sum += lanes[j];
    ((double *)per_tensor)[tensor] = sum;  /* here `tensor` is the chunk index */
}
#undef LANES

/* Per tensor of list `list`, the sum of squares of float32(g*mult) (in double, summed chunk by
 * chunk in order). Returns 0, or -1 when out of memory (nothing written). */
static int SFX(square_sums)(int64_t n_tensors, const int64_t *numel, const uintptr_t *pointers,
                            int list, double mult, double *sums, int n_threads) {
    chunk_t *chunks;
    int64_t total;
    int64_t count = plan_chunks(n_tensors, numel, &chunks, &total);
    if (count < 0) return -1;
    double *partial = (double *)malloc((size_t)(count > 0 ? count : 1) * sizeof(double));
    if (!partial) {
        free(chunks);
        return -1;
    }
    const pass_t pass = {chunks, count, total, n_tensors, pointers, list, 1, 1, sizeof(real),
                         SFX(square_sum), NULL, mult, partial};
    run_pass(&pass, n_threads);
    int64_t c = 0;
    for (int64_t t = 0; t < n_tensors; ++t) {
        double sum = 0;
        for (; c < count && chunks[c].tensor == t; ++c) sum += partial[c];
        sums[t] = sum;
    }
    free(chunks);
    free(partial);
    return 0;
}

/* Exported: the per-tensor sums of squares of list 0 (the gradients' L2 norms, squared). */
int SFX(trainop_square_sums)(int64_t n_tensors, const int64_t *numel, const uintptr_t *pointers,
                             double *sums, int n_threads) {
    return SFX(square_sums)(n_tensors, numel, pointers, 0, 1.0, sums, n_threads);
}

/* NovoGrad: per-tensor n2 = |float32(g)|^2, the float32 second moment (slot pointers in list
 * 3, one float each) and denominator, then the elementwise part. */
SIGNATURE(SFX(trainop_novograd)) {
    if (found_inf && *found_inf != 0) return 0;
    const double mult = multiplier ? *multiplier : 1.0;
    double *sums = (double *)malloc((size_t)(n_tensors > 0 ? n_tensors : 1) * sizeof(double));
    float *denominators = (float *)malloc((size_t)(n_tensors > 0 ? n_tensors : 1)
                                          * sizeof(float));
    if (!sums || !denominators
        || SFX(square_sums)(n_tensors, numel, pointers, 1, mult, sums, n_threads) != 0) {
        free(sums);
        free(denominators);
        return -1;
    }
    const float beta2 = (float)hyper[2], one_minus_beta2 = (float)(1.0 - hyper[2]);
    const float eps = (float)hyper[3];
    const int persistent = hyper[6] != 0;
    for (int64_t t = 0; t < n_tensors; ++t) {
        const float norm = (float)sqrt(sums[t]);
        const float n2 = norm * norm;
        if (persistent) {
            float *ema = (float *)pointers[3 * n_tensors + t];
            const float v = *ema == 0.0f ? n2 : *ema * beta2 + n2 * one_minus_beta2;
            *ema = v;
            denominators[t] = sqrtf(v) + eps;
        } else {
            denominators[t] = sqrtf(n2 + eps);
        }
    }
    free(sums);
    int status = drive(3, n_tensors, numel, pointers, sizeof(real), SFX(novograd_update), hyper,
                       mult, denominators, n_threads);
    free(denominators);
    return status;
}

/* LazyAdam's rule, which TF runs on the touched rows only (the dense rule is Adam's, above).
 * hyper: alpha, beta1, beta2, epsilon.
 *   m = m*beta1 + g*(1-beta1); v = v*beta2 + g*g*(1-beta2); var -= alpha*m/(sqrt(v) + eps) */
RANGE(lazy_adam) {
    UNUSED_RANGE_ARGS;
    real *restrict var = VAR; const real *restrict grad = GRAD;
    real *restrict m = SLOT(0); real *restrict v = SLOT(1);
    const real alpha = (real)hyper[0], beta1 = (real)hyper[1], beta2 = (real)hyper[2];
    const real eps = (real)hyper[3], mult = (real)multiplier;
    const real one_minus_beta1 = (real)(1.0 - hyper[1]);
    const real one_minus_beta2 = (real)(1.0 - hyper[2]);
    for (int64_t i = 0; i < n; ++i) {
        const real g = grad[i] * mult;
        const real mi = m[i] * beta1 + g * one_minus_beta1;
        const real vi = v[i] * beta2 + g * g * one_minus_beta2;
        m[i] = mi;
        v[i] = vi;
        var[i] += -(alpha * mi / (SQRT(vi) + eps));
    }
}

/* The sparse-row exports (rows.h): trainop_rows_<rule>, each rule over a gradient's distinct
 * rows, for the optimizers whose sparse update is their dense rule on the touched rows, and
 * RMSProp's sparse form. The count is the variable and its slots. */
EXPORT_ROWS(gradient_descent, 1)
EXPORT_ROWS(adagrad, 2)
EXPORT_ROWS(adagrad_da, 3)
EXPORT_ROWS(adadelta, 3)
EXPORT_ROWS(rmsprop_sparse, 3)
EXPORT_ROWS(rmsprop_centered_sparse, 4)
EXPORT_ROWS(ftrl, 3)
EXPORT_ROWS(proximal_gd, 1)
EXPORT_ROWS(proximal_adagrad, 2)
EXPORT_ROWS(momentum, 2)
EXPORT_ROWS(lazy_adam, 3)

#undef EXPORT_ROWS
#undef EXPORT_
#undef EXPORT
#undef RANGE
#undef UNUSED_RANGE_ARGS
#undef VAR
#undef GRAD
#undef SLOT
#undef FTRL_LOOP
#undef FTRL_SQRT
#undef FTRL_POW
