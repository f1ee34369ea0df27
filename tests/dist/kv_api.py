"""Two workers through mx.kvstore directly: rank / num_workers / barrier, init takes rank 0's
values, push sums over devices and workers (with and without an optimizer), mismatched keys
and module parameters are found at init naming them, buckets whose parameters differ are
refused. Writes <out>/kv_api_<rank>.json."""
import json
import sys

import numpy as np

import mxfn as mx
from mxfn import module as m

out = sys.argv[1]
kv = mx.kvstore.create("dist_sync")
rank, n = mx.kvstore.rank(kv), mx.kvstore.num_workers(kv)
res = {"rank": rank, "num_workers": n, "type": mx.kvstore.kv_type(kv)}
mx.kvstore.barrier(kv)

# init: rank 0's value everywhere.
mx.kvstore.init(kv, ["w", 7], [mx.nd.ones((2, 3)) * (rank + 1), mx.nd.array([rank * 10.0])])
res["init_w"] = mx.kvstore.pull(kv, "w").asnumpy().tolist()
res["init_7"] = mx.kvstore.pull(kv, 7).asnumpy().tolist()
# push: two devices per worker, summed over devices and workers.
mx.kvstore.push(kv, "w", [mx.nd.ones((2, 3)) * (rank + 1), mx.nd.ones((2, 3))])
res["push_w"] = mx.kvstore.pull(kv, "w").asnumpy().tolist()
# float64 values are summed too.
mx.kvstore.init(kv, "d", mx.nd.array([0.0], dtype="float64"))
mx.kvstore.push(kv, "d", mx.nd.array([0.1 * (rank + 1)], dtype="float64"))
res["push_d"] = mx.kvstore.pull(kv, "d").asnumpy().tolist()
res["push_d_dtype"] = str(mx.kvstore.pull(kv, "d").dtype)
# an optimizer on the store: the summed gradient updates the same weight everywhere.
kv2 = mx.kvstore.create("horovod")
mx.kvstore.set_optimizer(kv2, mx.optimizer.sgd(learning_rate=0.5))
mx.kvstore.init(kv2, 0, mx.nd.ones(2) * (rank + 3))
mx.kvstore.push(kv2, 0, mx.nd.ones(2) * (rank + 1))
res["update"] = mx.kvstore.pull(kv2, 0).asnumpy().tolist()

# mismatched keys / shapes at init: an error naming the key, on every worker.
try:
    mx.kvstore.init(kv, "bad", mx.nd.zeros((2,) if rank == 0 else (3,)))
except mx.MXFNError as e:
    res["bad_shape"] = str(e)
try:
    mx.kvstore.init(kv, "only%d" % rank, mx.nd.zeros(1))
except mx.MXFNError as e:
    res["bad_key"] = str(e)

# mismatched module parameters at init_optimizer: an error naming the parameter.
data = mx.sym.variable("data")
net = mx.sym.softmax_output(
    mx.sym.fully_connected(mx.sym.relu(mx.sym.fully_connected(data, num_hidden=8 + 2 * rank, name="fc1")),
                           num_hidden=3, name="fc2"), name="softmax")
mod = m.module(net)
m.bind(mod, data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
m.init_params(mod)
try:
    m.init_optimizer(mod, kvstore="dist_sync")
except mx.MXFNError as e:
    res["bad_param"] = str(e)

# buckets on several workers: one collective sums the current bucket's gradients, so a bucket
# whose parameters differ from the default bucket's is refused; one with the same ones trains.
def bucket_gen(key):
    h = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=4, name="fc")
    if key == 2:
        h = mx.sym.fully_connected(h, num_hidden=4, name="fc_extra")
    return mx.sym.softmax_output(h, name="softmax"), ("data",), ("softmax_label",)


bm = m.bucketing_module(bucket_gen, default_bucket_key=1)
m.bind(bm, data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
m.init_params(bm)
m.init_optimizer(bm, kvstore="dist_sync")
m.switch_bucket(bm, 3, data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
batch = mx.io.data_batch(data=[mx.nd.ones((4, 5))], label=[mx.nd.zeros(4)], bucket_key=3)
m.forward_backward(bm, batch)
m.update(bm)
res["bucket_same_params"] = m.get_params(bm)[0]["fc_weight"].asnumpy().tolist()
try:
    m.switch_bucket(bm, 2, data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
except mx.MXFNError as e:
    res["bucket_other_params"] = str(e)
try:
    mx.kvstore.create("dist_async")
except mx.MXFNError as e:
    res["async"] = str(e)

with open(f"{out}/kv_api_{rank}.json", "w") as f:
    json.dump(res, f)
