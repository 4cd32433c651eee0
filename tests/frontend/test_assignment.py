"""Assignment as NumPy users write it: x[i] = v, x += v, out=, np.add.at, and arrays made with
np.zeros/np.empty/... inside the function that traced values are stored into.

Each function runs on NumPy (on copies of the inputs) and through adjit: values must match,
gradients must match central differences, and every backend must agree with the NumPy one.
"""
import numpy as np
import pytest

import adjit

# these programs write into their arguments on purpose (NumPy's semantics under test)
pytestmark = pytest.mark.filterwarnings("ignore:.*wrote into its argument")

RNG = np.random.default_rng(7)
X = RNG.normal(size=(4, 3))


def _copy_then(a):
    z = a.copy()
    z[0] = a[1] * 2
    return z


def _column_update(a):
    z = a * 1
    z[:, 1] += a[:, 0]
    return z


def _view_sees_later_write(a):
    v = a[1]
    a[1] = 5.0
    return v + a[1]


def _alias_sees_augmented(a):
    b = a
    b += 1
    return a * b


def _write_through_row_view(a):
    r = a[0]
    r[1] = 7.0
    return a


def _fancy_last_write_wins(a):
    z = np.zeros_like(a)
    z[[0, 0, 2], [1, 1, 0]] = a[:3, 2]
    return z


def _transpose_view_write(a):
    z = a.T
    z[0, 1] = 3.0
    return a


def _chained_index_write(a):
    a[0][1] = a[2][2]
    return a


def _np_copy_is_a_copy(a):
    y = np.copy(a)
    y[0] = 0.0
    return a + y


def _ufunc_out(a):
    out = np.exp(a)
    np.add(out, a, out=out)
    return out


def _add_at_accumulates(a):
    z = a * 1
    np.add.at(z, [0, 0, 1], a[:3, 0][:, None])
    return z


def _reshape_view_write(a):
    z = a.reshape(-1)
    z[3:5] = -z[0:2]
    return a


def _recurrence_in_place(a):
    h = a.copy()
    for t in range(1, 4):
        h[t] = np.tanh(h[t - 1] + a[t])
    return h


def _reversed_view_sees_write(a):
    b = a[:, ::-1]
    a[:, 0] = 0.0
    return b


def _astype_copies(a):
    z = a.astype(a.dtype)
    z *= 2
    return a + z


def _mask_gather_is_a_copy(a):
    m = a[np.array([True, False, True, False])]
    m[0] = 1.0
    return a + m[1]


def _slice_view_augmented(a):
    v = a[1:3]
    v *= 2
    return a


def _block_and_ellipsis(a):
    z = a.copy()
    z[1:3, 0:2] = np.array([[1.0, 2.0], [3.0, 4.0]])
    z[..., -1] = a[:, 0]
    return z


def _swap_like_updates(a):
    z = a.copy()
    z[0] += z[1]
    z[1] -= z[0]
    return z


def _zeros_filled_in_loop(a):
    out = np.zeros((4, 3))
    for i in range(4):
        out[i] = np.sin(a[i]) * i
    return out


def _rnn_hidden_states(a):
    h = np.zeros(3)
    hs = np.zeros((4, 3))
    for t in range(4):
        h = np.tanh(a[t] + 0.5 * h)
        hs[t] = h
    return hs.sum(axis=0) + hs.T @ np.ones(4)


def _empty_like_columns(a):
    out = np.empty_like(a)
    out[:, 0] = a[:, 0]
    out[:, 1:] = a[:, 1:] * 2
    return out


def _accumulator(a):
    acc = np.zeros(3)
    for r in a:
        acc += r ** 2
    return acc


def _eye_entries(a):
    m = np.eye(3)
    m[0, 1] = a[0, 0]
    m[1, 0] = a[0, 0]
    return np.linalg.inv(m + 3 * np.eye(3)) @ a[0]


def _buffer_view_taken_before(a):
    b = np.ones((4, 3))
    row = b[1]
    row[:] = a[2]
    return b * a


def _buffer_slice(a):
    z = np.zeros(5)
    z[1:4] = a[:, 0][:3]
    return np.diff(z)


def _buffer_ufunc_out_and_adjit(a):
    out = np.zeros((2, 3))
    out[0] = a[0]
    np.add(out, a[1], out=out)
    return adjit.relu(out)


def _full_fancy(a):
    out = np.full((4,), 2.0)
    out[[0, 2]] = a[:2, 1]
    return np.exp(out)


def _buffer_whole_then_scaled(a):
    buf = np.zeros((4, 3))
    buf[...] = a
    buf *= 2
    return np.mean(buf, axis=0)


def _scalar_entries(a):
    out = np.zeros(4)
    for i in range(4):
        out[i] = np.sum(a[i] ** 2)
    return np.sqrt(out)


def _buffer_transposed_view(a):
    out = np.zeros((3, 4))
    out.T[:] = a
    return out


def _buffer_recurrence(a):
    out = np.zeros(4)
    out[0] = a[0, 0]
    for i in range(1, 4):
        out[i] = out[i - 1] * 0.5 + a[i, 0]
    return out


def _buffer_in_concatenate_and_where(a):
    out = np.zeros((4, 3))
    out[1] = a[1]
    return np.concatenate([np.where(out > 0, out, 0.1 * out), a])


def _buffer_augmented(a):
    out = np.zeros(3)
    out += a[0]
    out -= a[1]
    return out * out


def _leading_unit_axes_dropped(a):
    z = a.copy()
    z[0] = a[1:2] * 3  # a (1, 3) value into a (3,) row, as NumPy allows
    return z


def _unchanged_buffer_is_a_constant(a):
    c = np.zeros(3)
    c[1] = 2.0
    return a * c


def _view_of_pending_writes(a):
    z = np.zeros((4, 3))
    z[0] = a[0]
    r = z[0]
    z[0] = 2 * a[1]  # r is a view: it shows this
    return r + z[1]


def _stored_value_is_a_snapshot(a):
    b = a.copy()
    h = b[0]
    z = np.zeros((2, 3))
    z[0] = h
    b[0] = 5.0  # h changes with b; z[0] keeps the value it was given
    return z + h


def _zero_dim_buffer(a):
    s = np.zeros(())
    s[...] = np.sum(a)
    s += 1.0
    return s * a


def _rows_out_of_order_over_a_base(a):
    z = np.ones((5, 3))
    for i in (3, 1, 0):
        z[i] = a[i] * (i + 1)
    z[1, 2] = a[0, 0]
    return z


def _stale_view_as_value(a):
    z = a.copy()
    v = z[1:3]
    z[0] = 1.0
    z[3] = v[0] * 2  # v was taken before the write to z[0]: it still reads z's current value
    w = z[2]
    z[2] = w * 3
    z[1] = w  # w is a view: it shows z[2] * 3 by now
    return z


def _recurrence_with_element_writes(a):
    z = np.zeros((4, 3))
    z[0] = a[0]
    for i in range(1, 4):
        prev = z[i - 1]
        z[i] = prev * 0.5 + a[i]
        z[i, 0] = prev[1]
    return z


def _swap_elements(a):
    v = a[0].copy()
    t = v[0]  # a scalar: NumPy copies it
    v[0] = v[1]
    v[1] = t
    v[1], v[2] = v[2], v[1]
    return v * a[1]


def _transposed_reshape_copies(a):
    y = a.T.reshape(-1)  # not contiguous: NumPy copies
    y[0] = 100.0
    z = a[:, ::2].reshape(-1)
    z[1] = -1.0
    w = a[0].reshape(3, 1)  # contiguous: a view
    w[0] = 7.0
    return a * y[:3].sum() + z[0]


def _clip_out_and_astype_no_copy(a):
    np.clip(a, -0.5, 0.5, out=a)
    b = a.astype(a.dtype, copy=False)  # a itself
    b[0, 0] = 2.0
    a.clip(-0.4, 0.4, out=a)
    return a


def _diagonal_shows_later_writes(a):
    d = np.diagonal(a)
    e = a.diagonal(1)
    a[1, 1] = a[0, 0] * 3
    a[0, 1] = 5.0
    return np.sum(d * d) + e


def _list_of_traced_values(a):
    v = a[0].copy()
    v[:2] = (v[1], v[0])
    v[:] = [v[2], 7.0, v[0]]
    return v * a[1]


def _buffer_ufunc_out_and_numpy_views(a):
    b = np.zeros(3)
    np.add(b, a[0], out=b)
    c = np.zeros((3, 1))
    t = np.transpose(c)  # a view of c taken before any traced write
    c[0, 0] = a[1, 0]
    return b * t[0]


def _iterating_a_buffer(a):
    b = np.zeros((4, 3))
    for i, r in enumerate(b):
        r += a[i] * i
    return b


def _np_array_receives_traced_values(a):
    z = np.array(3.0)
    z[()] = np.sum(a)
    s = np.array([0.0, 0.0])
    s[0] = a[0, 0]
    s[1] = a[1, 2] * 2
    return z * s


def _flat_writes(a):
    a.flat[3] = 9.0
    return a * a.flat[4]


def _fill_and_sort_in_place(a):
    b = a.copy()
    b.sort(axis=1)
    c = a[0].copy()
    c.fill(2.0)
    return b * c


def _numpy_in_place_functions(a):
    b = np.zeros_like(a)
    np.copyto(b, a * 2)
    np.copyto(b, 0.0, where=a > 0.3)
    np.put(b, [0, 5], a[1, :2])
    np.putmask(b, a < -0.5, 1.0)
    np.put_along_axis(b, np.argmax(a, axis=1, keepdims=True), 0.0, axis=1)
    d = np.zeros((3, 3))
    np.fill_diagonal(d, a[0])
    return b + np.concatenate([d @ a[:3], a[3:]])


def _masked_updates(a):
    x = a.copy()
    x[x > 0] *= 3
    m = np.abs(a) < 0.8
    x[m] = np.exp(x[m]) - 1
    x[~m] /= 2
    y = a * 2
    x[a[:, 0] > 0] = y[a[:, 0] > 0] + 1  # the mask written twice: the same mask
    b = np.zeros((4, 3))
    b[a > 0] = a[a > 0] ** 2
    return x + b


CASES = [_copy_then, _column_update, _view_sees_later_write, _alias_sees_augmented,
         _write_through_row_view, _fancy_last_write_wins, _transpose_view_write,
         _chained_index_write, _np_copy_is_a_copy, _ufunc_out, _add_at_accumulates,
         _reshape_view_write, _recurrence_in_place, _reversed_view_sees_write, _astype_copies,
         _mask_gather_is_a_copy, _slice_view_augmented, _block_and_ellipsis,
         _swap_like_updates, _zeros_filled_in_loop, _rnn_hidden_states, _empty_like_columns,
         _accumulator, _eye_entries, _buffer_view_taken_before, _buffer_slice,
         _buffer_ufunc_out_and_adjit, _full_fancy, _buffer_whole_then_scaled, _scalar_entries,
         _buffer_transposed_view, _buffer_recurrence, _buffer_in_concatenate_and_where,
         _buffer_augmented, _leading_unit_axes_dropped, _unchanged_buffer_is_a_constant,
         _view_of_pending_writes, _stored_value_is_a_snapshot, _zero_dim_buffer,
         _rows_out_of_order_over_a_base, _stale_view_as_value,
         _recurrence_with_element_writes, _swap_elements, _transposed_reshape_copies,
         _clip_out_and_astype_no_copy, _diagonal_shows_later_writes, _list_of_traced_values,
         _buffer_ufunc_out_and_numpy_views, _iterating_a_buffer,
         _np_array_receives_traced_values, _flat_writes, _fill_and_sort_in_place,
         _numpy_in_place_functions, _masked_updates]
IDS = [f.__name__.strip("_") for f in CASES]


@pytest.mark.parametrize("fn", CASES, ids=IDS)
def test_value_matches_numpy_and_leaves_the_argument_alone(fn):
    x = X.copy()
    got = adjit.compile(fn, backend="numpy")(x)
    np.testing.assert_array_equal(x, X)  # the caller's array is not written
    np.testing.assert_allclose(got, fn(X.copy()), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", CASES, ids=IDS)
def test_gradient_matches_central_differences(fn):
    assert adjit.gradcheck(lambda a: np.sum(np.sin(fn(a) + 0.3)), X) < 1e-6


@pytest.mark.parametrize("fn", CASES, ids=IDS)
@pytest.mark.parametrize("opts", [dict(backend="numpy", fuse=True),
                                  dict(backend="numpy", checkpoint="sqrt"),
                                  dict(backend="numba", min_kernel_size=0)],
                         ids=["fused", "checkpointed", "numba"])
def test_backends_agree(fn, opts):
    def loss(a):
        return np.sum(np.sin(fn(a)))
    v0, g0 = adjit.value_and_grad(loss, backend="numpy", fuse=False)(X)
    v1, g1 = adjit.value_and_grad(loss, **opts)(X)
    np.testing.assert_allclose(v1, v0, rtol=1e-12)
    np.testing.assert_allclose(g1, g0, rtol=1e-10, atol=1e-12)


def test_float32_stays_float32():
    def f(a):
        out = np.zeros_like(a)
        out[1:] = a[:-1] * 2
        out += a
        return out
    x = X.astype(np.float32)
    got = adjit.compile(f, backend="numpy")(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, f(x.copy()), rtol=1e-6)


def test_int_array_receives_truncated_values_as_numpy_does():
    def f(a):
        k = np.arange(4)
        z = a.astype(np.int64)
        z[0] = a[1] * 2.7
        return z + k
    x = np.array([1.5, 2.5, 3.5, 4.5])
    np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(x), f(x.copy()))


def test_augmented_assignment_follows_numpy_casting():
    def f(a):
        k = a.astype(np.int64)
        k += a  # NumPy refuses: float64 into int64 with same_kind casting
        return k
    with pytest.raises(adjit.UnsupportedError, match="same_kind"):
        adjit.compile(f, backend="numpy")(np.ones(3))


def test_augmented_assignment_cannot_change_the_shape():
    def f(a):
        v = a[0]
        v += a  # (3,) += (4, 3)
        return v
    with pytest.raises(adjit.ShapeError, match=r"shape \(4, 3\).*\(3,\)"):
        adjit.compile(f, backend="numpy")(X)


def test_value_that_does_not_broadcast_names_both_shapes():
    def f(a):
        z = a.copy()
        z[0] = a[:2]
        return z
    with pytest.raises(adjit.ShapeError, match=r"from shape \(2, 3\) into shape \(3,\)"):
        adjit.compile(f, backend="numpy")(X)


def test_out_of_bounds_assignment_is_a_shape_error():
    def f(a):
        z = a.copy()
        z[7] = 1.0
        return z
    with pytest.raises(adjit.ShapeError, match="out of bounds"):
        adjit.compile(f, backend="numpy")(X)


def test_broadcast_view_is_read_only_as_in_numpy():
    def f(a):
        b = np.broadcast_to(a[0], (4, 3))
        b[1] = 0.0
        return b
    with pytest.raises(adjit.UnsupportedError, match="read-only"):
        adjit.compile(f, backend="numpy")(X)


def test_traced_value_into_an_outside_numpy_array_is_refused_clearly():
    outside = np.zeros((4, 3))  # made before the trace: a plain NumPy array

    def f(a):
        np.multiply(a, 2, out=outside)
        return outside
    with pytest.raises(adjit.UnsupportedError, match="out=a.*create a inside"):
        adjit.compile(f, backend="numpy")(X)


def test_assigning_into_an_enclosing_trace_is_refused():
    def f(a):
        def inner(w):
            a[0] = w  # a belongs to the enclosing trace
            return np.sum(a)
        return adjit.grad(inner)(a[1])
    with pytest.raises(adjit.UnsupportedError, match="enclosing traced function"):
        adjit.compile(f, backend="numpy")(X)


def test_buffers_are_plain_arrays_outside_traces():
    assert type(np.zeros(3)) is np.ndarray
    adjit.compile(_zeros_filled_in_loop, backend="numpy")(X)
    assert type(np.zeros(3)) is np.ndarray and np.zeros is np.zeros


def test_generated_code_has_no_nan_poison():
    src = adjit.grad(lambda a: np.sum(_rnn_hidden_states(a)), backend="numpy").lower(X).source
    assert "nan" not in src.lower()


def test_filling_rows_in_a_loop_becomes_one_concatenation():
    def f(a):
        out = np.zeros((4, 3))
        for i in range(4):
            out[i] = np.tanh(a[i])
        return out
    g = adjit.trace(f, X)
    ops = [g[n]["op"] for n in g.nodes()]
    assert ops.count("concatenate") == 1 and "where" not in ops and "gather" not in ops


def test_reading_back_what_a_loop_just_wrote_needs_no_full_array_nodes():
    def euler(p, T):
        x = np.zeros((T, 2))
        x[0] = p[:2]
        for i in range(T - 1):
            pos, vel = x[i, 0], x[i, 1]
            x[i + 1, 0] = pos + 0.01 * vel
            x[i + 1, 1] = vel - 0.01 * p[2] * pos
        return np.sum(x[:, 0] ** 2)

    def whole_array_ops(T):
        g = adjit.trace(euler, np.array([1.0, 0.0, 2.0]), T, static_argnums=(1,))
        ops = [g[n]["op"] for n in g.nodes()]
        return ops.count("concatenate"), ops.count("gather"), ops.count("where")
    assert whole_array_ops(20) == whole_array_ops(60)  # not one per step
    assert adjit.gradcheck(euler, np.array([1.0, 0.0, 2.0]), 50, static_argnums=(1,)) < 1e-6


Y = np.array([2, 0, 1, 2])


def _one_hot(z, y):
    t = np.zeros_like(z)
    t[np.arange(len(y)), y] = 1.0
    return -np.sum(t * (z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))))


def _label_smoothing(z, y):
    t = np.full_like(z, 0.1 / 3)
    t[np.arange(len(y)), y] += 0.9
    return np.sum(t * z)


def _at_the_argmax(z, y):
    q = z.copy()
    q[np.argmax(z[:, 0]), 1] = 0.0
    q[1, np.argmin(z[1])] += 2.0
    return np.sum(np.sin(q * z))


def _counts_by_label(z, y):
    c = np.zeros(3)
    np.add.at(c, y, z[:, 0])
    g = np.zeros_like(z)
    np.add.at(g, (np.arange(4), y), z[:, 1])
    return np.sum(c * c) + np.sum(g * z)


@pytest.mark.parametrize("fn", [_one_hot, _label_smoothing, _counts_by_label, _at_the_argmax],
                         ids=["one_hot", "label_smoothing", "add_at_labels", "at_argmax"])
def test_positions_from_traced_labels(fn):
    np.testing.assert_allclose(adjit.compile(fn, backend="numpy")(X, Y), fn(X.copy(), Y),
                               rtol=1e-12)
    assert adjit.gradcheck(fn, X, Y) < 1e-6


def test_assignment_at_labels_that_may_repeat():
    def f(z, y):
        q = z.copy()
        q[y] = 0.0  # y holds 2 twice: a few labels are written one by one, as NumPy's loop
        return q
    np.testing.assert_array_equal(adjit.compile(f, backend="numpy")(X, Y), f(X, Y))
    many = np.arange(100) % 3      # many labels that may repeat: refused
    with pytest.raises(adjit.UnsupportedError, match="np.add.at"):
        adjit.compile(f, backend="numpy")(np.arange(3.0), many)


def test_setting_shape_is_refused():
    def f(a):
        a.shape = (12,)
        return a
    with pytest.raises(adjit.UnsupportedError, match=r"x = x.reshape"):
        adjit.compile(f, backend="numpy")(X)


def test_diagonal_is_read_only_as_in_numpy():
    def f(a):
        d = np.diagonal(a)
        d[0] = 1.0
        return d
    with pytest.raises(adjit.UnsupportedError, match="read-only"):
        adjit.compile(f, backend="numpy")(X)


def test_masked_update_keeps_the_gradient_finite_where_the_mask_is_off():
    def f(a):
        x = a.copy()
        x[x > 0] = np.log(x[x > 0])  # log is singular at the unselected 0
        return np.sum(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        g = adjit.grad(f, backend="numpy")(np.array([0.0, 1.0, 2.0, -1.0]))
    np.testing.assert_allclose(g, [1.0, 1.0, 0.5, 1.0])


@pytest.mark.parametrize("fn", [lambda a: np.sort(a[a > 0]), lambda a: len(a[a > 0]),
                                lambda a: a[a > 0][0]],
                         ids=["sort", "len", "index"])
def test_other_uses_of_a_traced_mask_selection_are_refused(fn):
    # the message gives the full-size form, with the masked mean done right (sweep 30: it said
    # adjit.where(mask, x, 0), whose mean divides by every element)
    with pytest.raises(adjit.UnsupportedError,
                       match=r"np\.sum\(np\.where\(mask, x, 0\)\) / np\.sum\(mask\)"):
        adjit.compile(fn, backend="numpy")(X)


_B = np.random.default_rng(5).normal(size=(4, 5, 3))
_M = _B[..., 0] > 0.2                    # a (4, 5) mask: x[m] is (k, 3)


@pytest.mark.parametrize("fn", [
    lambda x, m: x[m].sum(), lambda x, m: np.mean(x[m], axis=0),
    lambda x, m: x[m].mean(axis=1).sum(), lambda x, m: x[m].var(),
    lambda x, m: np.std(x[m], axis=0, ddof=1), lambda x, m: np.max(x[m]),
    lambda x, m: x[m].min(axis=0), lambda x, m: np.prod(x[m] * 0.5 + 1, axis=(0, 1)),
    lambda x, m: np.count_nonzero(x[m] > 0.3), lambda x, m: x[m].sum(keepdims=True),
    lambda x, m: x[m].mean(0, keepdims=True), lambda x, m: np.any(x[m] > 2),
    lambda x, m: (x[m] ** 2).sum() / x[m].size, lambda x, m: np.var(x[m], 0, None, None, 1),
    lambda x, m: np.exp(x[m]).sum(axis=-1).max(),
], ids=["sum", "mean0", "mean1", "var", "std-ddof", "max", "min0", "prod", "count",
        "keepdims", "mean-keep", "any", "size", "var-positional", "later-then-first"])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_reductions_of_a_traced_mask_selection_reduce_the_selected_elements(fn, backend):
    # sweep 30: nll[valid].mean() was refused, and the advice given divided by every element
    got, ref = adjit.compile(fn, backend=backend)(_B, _M), fn(_B, _M)
    assert np.shape(got) == np.shape(ref) and np.asarray(got).dtype == np.asarray(ref).dtype
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    if np.asarray(ref).dtype.kind == "f":
        assert adjit.gradcheck(lambda x: np.sum(fn(x, _M)), _B) < 1e-6


def test_a_masked_mean_of_an_empty_selection_is_nan_and_its_max_minus_inf():
    empty = np.zeros((4, 5), bool)
    with np.errstate(invalid="ignore"):
        assert np.isnan(adjit.compile(lambda x, m: x[m].mean())(_B, empty))
    assert adjit.compile(lambda x, m: x[m].max())(_B, empty) == -np.inf
    assert adjit.compile(lambda x, m: x[m].sum())(_B, empty) == 0
