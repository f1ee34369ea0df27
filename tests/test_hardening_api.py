"""Issue #16, second part: the limits policy, safe file writes, and the API corners the
acceptance probe found (kvstore.pull, the module monitor, bucketing, init_params with mixed /
load, data= keywords, optimizer values and symbol multipliers, backward without head
gradients, empty contexts, print_summary)."""

import gzip
import os
import stat
import threading

import numpy as np
import pytest

import mxfn as mx
from mxfn import MXFNError
from mxfn import module as m
from mxfn import monitor as mon_ns


def _mlp(hidden=3):
    x = mx.sym.variable("data")
    fc = mx.sym.fully_connected(x, num_hidden=hidden, name="fc")
    return mx.sym.softmax_output(fc, name="softmax")


def _bound(sym=None, batch=2, width=4, **bind):
    mod = m.module(sym if sym is not None else _mlp())
    return m.bind(mod, data_shapes=[("data", (batch, width))],
                  label_shapes=[("softmax_label", (batch,))], **bind)


# -- limits policy ------------------------------------------------------------------------------

def test_an_array_larger_than_memory_names_the_limit_and_how_to_raise_it():
    with pytest.raises(MXFNError, match=r"nd.full: shape.*MXFN_MAX_BYTES.*3136000000000000 bytes"):
        mx.nd.zeros((10**12, 784))


def test_an_operator_output_larger_than_memory_is_an_error_not_an_abort():
    with pytest.raises(MXFNError, match=r"one_hot: output.*MXFN_MAX_BYTES"):
        mx.nd.one_hot(mx.nd.array([1.0, 2.0]), depth=10**13)


def test_binding_a_layer_of_a_trillion_units_is_refused_before_allocating():
    with pytest.raises(MXFNError, match=r"simple_bind: the shape of \"fc_weight\".*MXFN_MAX_BYTES"):
        _bound(_mlp(hidden=10**12))


def test_iterators_refuse_a_batch_that_cannot_fit():
    x = np.ones((10, 784), np.float32)
    with pytest.raises(MXFNError, match=r"io.ndarray_iter: batch_size.*MXFN_MAX_BYTES"):
        mx.io.ndarray_iter(x, label=np.zeros(10, np.float32), batch_size=10**12)


def test_csv_iter_refuses_a_data_shape_whose_size_wraps(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("1,2\n3,4\n")
    with pytest.raises(MXFNError, match=r"io.csv_iter: data_shape.*strides would overflow"):
        mx.io.csv_iter(data_csv=str(f), data_shape=(2**32, 2**32), batch_size=1)


def test_a_symbol_file_asking_for_a_huge_num_args_is_refused(tmp_path):
    f = tmp_path / "s-symbol.json"
    f.write_text('{"nodes":[{"op":"null","name":"a","inputs":[]},{"op":"Concat","name":"c",'
                 '"attrs":{"num_args":"100000000","dim":"1"},"inputs":[[0,0,0]]}],'
                 '"arg_nodes":[0],"heads":[[1,0,0]]}')
    with pytest.raises(MXFNError, match=r"num_args.*MAX_NUM_ARGS"):
        mx.sym.load(str(f))


def test_a_gzip_mnist_file_inflates_no_further_than_its_header(tmp_path):
    # The header announces 3 labels; the stream inflates to 64 MB of zeros.
    payload = (2049).to_bytes(4, "big") + (3).to_bytes(4, "big") + bytes(64 << 20)
    bomb = tmp_path / "labels.gz"
    bomb.write_bytes(gzip.compress(payload, 9))
    img = tmp_path / "img"
    img.write_bytes((2051).to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in (3, 1, 1)) + bytes(3))
    with pytest.raises(MXFNError, match=r"announce 3 bytes of label, the file has more"):
        mx.io.mnist_iter(image=str(img), label=str(bomb), batch_size=1)


def test_binding_a_batch_of_zero_names_the_data_shapes():
    with pytest.raises(MXFNError, match=r"module.bind: data_shapes.*at least 1 sample.*data: \(0, 4\)"):
        _bound(batch=0)


# -- file writes --------------------------------------------------------------------------------

def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_overwriting_keeps_the_files_mode(tmp_path):
    mod = m.init_optimizer(m.init_params(_bound()))
    targets = {
        "nd.save": (tmp_path / "a.params", lambda p: mx.nd.save(str(p), {"x": mx.nd.ones(2)})),
        "sym.save": (tmp_path / "a-symbol.json", lambda p: mx.sym.save(_mlp(), str(p))),
        "save_optimizer_states": (tmp_path / "a.states", lambda p: m.save_optimizer_states(mod, str(p))),
    }
    for name, (path, save) in targets.items():
        save(path)
        os.chmod(path, 0o600)
        save(path)
        assert _mode(path) == 0o600, name


def test_a_symlink_planted_at_the_old_temp_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "net-symbol.json"
    # The name the former writer used: .{name}.tmp{pid}
    os.symlink(victim, tmp_path / f".net-symbol.json.tmp{os.getpid()}")
    mx.sym.save(_mlp(), str(target))
    assert victim.read_text() == "precious"
    assert mx.sym.load(str(target)).list_arguments() == _mlp().list_arguments()


def test_threads_saving_one_symbol_path_never_collide(tmp_path):
    target = str(tmp_path / "shared-symbol.json")
    errors = []

    def save_and_read():
        try:
            for _ in range(20):
                mx.sym.save(_mlp(), target)
                mx.sym.load(target)
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            errors.append(e)

    threads = [threading.Thread(target=save_and_read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_temp_files_of_dead_writers_are_removed(tmp_path):
    stale = tmp_path / ".m.params.tmp.999999999.0.0"  # no such pid
    stale.write_bytes(b"partial")
    mx.nd.save(str(tmp_path / "m.params"), [mx.nd.ones(1)])
    assert not stale.exists()


# -- kvstore.pull fills its outs ----------------------------------------------------------------

def test_pull_writes_into_the_given_arrays():
    kv = mx.kvstore.init(mx.kvstore.create(), "w", mx.nd.full((2,), 3.0))
    out = mx.nd.zeros(2)
    mx.kvstore.pull(kv, "w", out)
    np.testing.assert_array_equal(out.asnumpy(), [3, 3])
    outs = [mx.nd.zeros(2), mx.nd.zeros(2, ctx=mx.cpu(1))]
    mx.kvstore.pull(kv, "w", outs)
    assert [o.asnumpy().tolist() for o in outs] == [[3, 3], [3, 3]]
    assert outs[1].context == mx.cpu(1)


# -- the module monitor -------------------------------------------------------------------------

def _monitored_module():
    mod = m.init_params(_bound(), initializer=mx.init.one())
    m.init_optimizer(mod)
    mon = mon_ns.monitor(1)
    m.install_monitor(mod, mon)
    return mod, mon


def _batch():
    return {"data": [mx.nd.ones((2, 4))], "label": [mx.nd.array([0, 1])]}


def test_module_monitor_reports_data_label_and_fresh_gradients_only():
    mod, mon = _monitored_module()
    mon_ns.tic(mon)
    m.forward_backward(mod, _batch())
    names = [n for _, n, _ in mon_ns.toc(mon)]
    for expected in ["fc_output", "softmax_output", "data", "softmax_label", "fc_weight", "fc_bias",
                     "fc_weight_grad", "fc_bias_grad"]:
        assert expected in names, expected
    assert "data_grad" not in names  # no gradient was asked for the data
    mon_ns.tic(mon)
    m.forward(mod, _batch(), is_train=False)
    names = [n for _, n, _ in mon_ns.toc(mon)]
    assert "data" in names and "fc_weight" in names
    assert not [n for n in names if n.endswith("_grad")], names


def test_monitor_values_print_as_mxnet_does():
    mod, mon = _monitored_module()
    mon_ns.tic(mon)
    m.forward(mod, _batch(), is_train=False)
    values = {n: v for _, n, v in mon_ns.toc(mon)}
    # the default stat norm(x)/sqrt(size(x)) of the ones is 1, printed as a float32 scalar
    assert values["data"] == "1.0\t"
    x = np.float32(np.sqrt(np.mean(np.square([0.0, 1.0]))))
    assert values["softmax_label"] == str(x) + "\t"


# -- bucketing ----------------------------------------------------------------------------------

def _fc_gen(key):
    data = mx.sym.variable("data")
    # Unnamed on purpose: its automatic name must be the same in every bucket.
    fc = mx.sym.fully_connected(data, num_hidden=2)
    return mx.sym.make_loss(mx.sym.sum(fc)), ["data"], []


def test_grad_add_accumulates_across_buckets_and_unnamed_ops_share_params():
    bm = m.bucketing_module(_fc_gen, default_bucket_key=10)
    m.bind(bm, data_shapes=[("data", (1, 3))], grad_req="add")
    m.init_params(bm, initializer=mx.init.one())
    sums = []
    for key in (10, 5, 5, 10):
        m.forward_backward(bm, {"data": [mx.nd.ones((1, 3))], "bucket_key": key,
                                "provide_data": [("data", (1, 3))]})
        bias_grad = m.grad_arrays(bm)[-1][0]  # the last parameter (the bias), device 0
        sums.append(float(bias_grad.asnumpy()[0]))
    assert sums == [1.0, 2.0, 3.0, 4.0]


def test_sym_gen_runs_in_a_fresh_name_scope_and_leaves_the_callers_counters():
    before = mx.sym.fully_connected(mx.sym.variable("x"), num_hidden=1).name
    m.bucketing_module(_fc_gen, default_bucket_key=1)
    after = mx.sym.fully_connected(mx.sym.variable("x"), num_hidden=1).name
    n = int(before.rsplit("fullyconnected", 1)[1])
    assert after == f"fullyconnected{n + 1}"
    sym, _, _ = _fc_gen(1)
    assert "fullyconnected" in sym.list_arguments()[1]


# -- init_params with mixed and load initializers -----------------------------------------------

def test_init_params_takes_mixed_and_load_initializers():
    mod = _bound()
    init = mx.init.mixed(["fc_weight", ".*"], [mx.init.constant(0.5), mx.init.zero()])
    m.init_params(mod, initializer=init)
    args, _ = m.get_params(mod)
    np.testing.assert_array_equal(args["fc_weight"].asnumpy(), np.full((3, 4), 0.5))
    np.testing.assert_array_equal(args["fc_bias"].asnumpy(), np.zeros(3))
    loaded = mx.init.load({"fc_weight": np.full((3, 4), 7.0, np.float32)}, default_init=mx.init.one())
    m.init_params(mod, initializer=loaded, force_init=True)
    args, _ = m.get_params(mod)
    np.testing.assert_array_equal(args["fc_weight"].asnumpy(), np.full((3, 4), 7.0))
    np.testing.assert_array_equal(args["fc_bias"].asnumpy(), np.zeros(3))  # a bias: MXNet's rule


def test_fit_takes_a_mixed_initializer():
    x = np.random.RandomState(0).rand(8, 4).astype(np.float32)
    it = mx.io.ndarray_iter(x, label=(x[:, 0] > 0.5).astype(np.float32), batch_size=4)
    mod = m.fit(m.module(_mlp()), it, {"num_epoch": 1, "initializer": mx.init.mixed([".*"], [mx.init.xavier()])})
    assert m.params_initialized(mod)


# -- data= keywords -----------------------------------------------------------------------------

def test_hand_written_nd_functions_take_data_by_keyword():
    x = mx.nd.array([[1, 2, 3], [4, 5, 6]])
    assert mx.nd.sum(data=x).asnumpy() == 21
    assert mx.nd.mean(data=x, axis=1).asnumpy().tolist() == [2, 5]
    assert mx.nd.max(data=x).asnumpy() == 6 and mx.nd.min(data=x).asnumpy() == 1
    assert mx.nd.prod(data=x, axis=0).asnumpy().tolist() == [4, 10, 18]
    assert mx.nd.transpose(data=x).shape == (3, 2)
    assert mx.nd.reshape(data=x, shape=(3, 2)).shape == (3, 2)
    assert mx.nd.slice(data=x, begin=(0, 1), end=(1, 3)).asnumpy().tolist() == [[2, 3]]
    assert mx.nd.slice_axis(data=x, axis=1, begin=0, end=1).asnumpy().tolist() == [[1], [4]]


# -- optimizer values and the symbol's multipliers ----------------------------------------------

def test_an_optimizer_value_honours_the_symbols_lr_mult():
    x = mx.sym.variable("data")
    w = mx.sym.variable("fc_weight", lr_mult=0.0)
    net = mx.sym.softmax_output(mx.sym.fully_connected(x, weight=w, num_hidden=3, name="fc"), name="softmax")
    mod = m.init_params(_bound(net), initializer=mx.init.one())
    m.init_optimizer(mod, optimizer=mx.optimizer.sgd(learning_rate=1.0))
    m.forward_backward(mod, _batch())
    m.update(mod)
    args, _ = m.get_params(mod)
    np.testing.assert_array_equal(args["fc_weight"].asnumpy(), np.ones((3, 4)))  # frozen by lr_mult 0
    assert not np.allclose(args["fc_bias"].asnumpy(), 0.0)


# -- backward without head gradients ------------------------------------------------------------

def test_backward_without_head_gradients_on_a_non_loss_output_raises():
    x = mx.sym.variable("data")
    fc = mx.sym.fully_connected(x, num_hidden=2, name="fc")
    exe = mx.executor.simple_bind(fc, mx.cpu(), data=(1, 3))
    mx.executor.forward(exe, is_train=True, data=np.ones((1, 3)))
    with pytest.raises(MXFNError, match=r"backward: out_grads.*\"fc_output\" is not a loss layer"):
        mx.executor.backward(exe)
    mx.executor.backward(exe, [mx.nd.ones((1, 2))])  # with one it works


def test_backward_without_head_gradients_is_fine_when_nothing_needs_one():
    x = mx.sym.variable("data")
    exe = mx.executor.simple_bind(mx.sym.relu(x), mx.cpu(), data=(2,), grad_req="null")
    mx.executor.forward(exe, is_train=True, data=np.array([-1.0, 1.0]))
    mx.executor.backward(exe)  # a parameter-free graph may run forward_backward


# -- smaller corners ----------------------------------------------------------------------------

def test_an_empty_contexts_list_is_a_bad_value():
    with pytest.raises(MXFNError, match=r"contexts.*got \[\]"):
        m.module(_mlp(), contexts=[])


def test_print_summary_does_not_count_the_label_as_a_parameter(capsys):
    d = mx.sym.variable("data")
    h = mx.sym.activation(mx.sym.fully_connected(d, num_hidden=128, name="fc1"), act_type="relu")
    h = mx.sym.activation(mx.sym.fully_connected(h, num_hidden=64, name="fc2"), act_type="relu")
    net = mx.sym.softmax_output(mx.sym.fully_connected(h, num_hidden=10, name="fc3"), name="softmax")
    mx.visualization.print_summary(net, shape={"data": (1, 784)})
    assert "Total params: 109386" in capsys.readouterr().out
