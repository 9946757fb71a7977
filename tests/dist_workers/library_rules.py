"""The collectives' rules on 2 ranks: shapes, dtypes and reduce ops, each case's result or error.

argv: device type, backend name. Every rank runs every case in step and reports, per case, either
"ok <values>" (rank 0's and 1's results agree in shape by construction) or "<Error>: <message>".
The test compares them with what the native library (NCCL, XCCL) does.
"""

import sys

import torch
import torch.distributed as dist

from job import init, report

device_type, backend = sys.argv[1], sys.argv[2]
rank = init(backend)
world = dist.get_world_size()
device = torch.device(device_type, 0)
results: dict[str, str] = {}


def case(name: str):
    def run(body):
        try:
            value = body()
            results[name] = "ok " + repr(value.cpu().tolist() if isinstance(value, torch.Tensor) else value)
        except Exception as err:  # noqa: BLE001 - the error is the result
            results[name] = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        return body
    return run


def on(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device=device)


def full(shape, value, dtype=torch.float32):
    return torch.full(shape, value, dtype=dtype, device=device)


x23 = torch.arange(6, dtype=torch.float32, device=device).reshape(2, 3) + 10 * rank  # rank r: 10r .. 10r+5


@case("all_gather_into_tensor/flat")
def _():
    out = full((world * 6,), -1.0)
    dist.all_gather_into_tensor(out, x23)
    return out


@case("all_gather_into_tensor/stacked")
def _():
    out = full((world, 2, 3), -1.0)
    dist.all_gather_into_tensor(out, x23)
    return out


@case("all_gather_into_tensor/concatenated")
def _():
    out = full((world * 2, 3), -1.0)
    dist.all_gather_into_tensor(out, x23)
    return out


@case("all_gather_into_tensor/wrong_numel")
def _():
    dist.all_gather_into_tensor(full((world * 6 + 1,), -1.0), x23)


@case("all_gather_into_tensor/wrong_dtype")
def _():
    dist.all_gather_into_tensor(full((world * 6,), -1, torch.float64), x23)


@case("all_gather_into_tensor/coalesced_flat")
def _():
    outs = [full((world * 6,), -1.0), full((world, 2), -1.0)]
    with dist._coalescing_manager(async_ops=True) as manager:
        dist.all_gather_into_tensor(outs[0], x23)
        dist.all_gather_into_tensor(outs[1], full((2,), float(rank)))
    manager.wait()
    return torch.cat([o.flatten() for o in outs])


@case("reduce_scatter_tensor/flat_input")
def _():
    out = full((2, 3), -1.0)
    dist.reduce_scatter_tensor(out, torch.cat([x23.flatten(), x23.flatten() * 2]))
    return out


@case("reduce_scatter_tensor/stacked_input")
def _():
    out = full((3,), -1.0)
    dist.reduce_scatter_tensor(out, x23)  # [world, 3]: each rank gets one row, summed
    return out


@case("reduce_scatter_tensor/wrong_numel")
def _():
    dist.reduce_scatter_tensor(full((4,), -1.0), full((world * 4 + 2,), 1.0))


@case("reduce_scatter_tensor/coalesced_flat")
def _():
    out = full((2, 3), -1.0)
    with dist._coalescing_manager(async_ops=True) as manager:
        dist.reduce_scatter_tensor(out, torch.cat([x23.flatten(), x23.flatten() * 2]))
    manager.wait()
    return out


def reduced(dtype, values, op, function=dist.all_reduce):
    t = on(values, dtype)
    function(t, op=op)
    return t


@case("all_reduce/avg_float32")
def _():
    return reduced(torch.float32, [1.0 + rank, 5.0 * rank], dist.ReduceOp.AVG)


@case("all_reduce/avg_int64")
def _():
    return reduced(torch.int64, [3 + 4 * rank, -3 - 4 * rank], dist.ReduceOp.AVG)  # (3+7)/2, (-3-7)/2


@case("all_reduce/avg_bool")
def _():
    return reduced(torch.bool, [True, bool(rank)], dist.ReduceOp.AVG)


@case("all_reduce/premul_sum_float32")
def _():
    return reduced(torch.float32, [1.0 + rank, 4.0], dist._make_nccl_premul_sum(0.5))


@case("all_reduce/premul_sum_tensor_factor")
def _():
    return reduced(torch.bfloat16, [2.0 + rank, 8.0], dist._make_nccl_premul_sum(full((), 0.25, torch.bfloat16)))


@case("all_reduce/premul_sum_int64")
def _():
    return reduced(torch.int64, [1, 2], dist._make_nccl_premul_sum(2.0))


@case("all_reduce/sum_bool")
def _():
    return reduced(torch.bool, [True, bool(rank), False], dist.ReduceOp.SUM).view(torch.uint8)  # the bytes


@case("all_reduce/band")
def _():
    return reduced(torch.int32, [3, 5], dist.ReduceOp.BAND)


@case("all_reduce/int16")
def _():
    return reduced(torch.int16, [1, 2], dist.ReduceOp.SUM)


@case("all_reduce/uint32")
def _():
    return reduced(torch.uint32, [1, 2], dist.ReduceOp.SUM)


@case("all_reduce/float8_e4m3fn")
def _():
    return reduced(torch.float8_e4m3fn, [1.5 + rank, -2.0], dist.ReduceOp.SUM).float()


@case("all_reduce/float8_e5m2fnuz")
def _():
    return reduced(torch.float8_e5m2fnuz, [1.0, 2.0], dist.ReduceOp.SUM).float()


@case("all_reduce/noncontiguous")
def _():
    t = full((3, 4), 1.0 + rank).t()
    dist.all_reduce(t)
    return t


@case("all_reduce/channels_last")
def _():
    t = full((1, 2, 2, 2), 1.0 + rank).to(memory_format=torch.channels_last)
    dist.all_reduce(t)
    return t.flatten()


@case("reduce_scatter_tensor/avg_bfloat16")
def _():
    out = full((2,), -1.0, torch.bfloat16)
    dist.reduce_scatter_tensor(out, on([1.0, 2.0, 3.0, 4.0], torch.bfloat16) * (rank + 1), op=dist.ReduceOp.AVG)
    return out.float()


@case("reduce_scatter_tensor/premul_sum")
def _():
    source = on([1.0, 2.0, 3.0, 4.0]) * (rank + 1)
    out = full((2,), -1.0)
    dist.reduce_scatter_tensor(out, source, op=dist._make_nccl_premul_sum(0.5))
    return [out.cpu().tolist(), source.cpu().tolist()]  # the input is left as it was


@case("reduce/avg")
def _():
    t = on([2.0 + 2 * rank])
    dist.reduce(t, dst=0, op=dist.ReduceOp.AVG)
    return t if rank == 0 else on([0.0])


@case("all_gather_into_tensor/float8_e4m3fn")
def _():
    out = full((world * 2,), 0.0).to(torch.float8_e4m3fn)
    dist.all_gather_into_tensor(out, on([1.0 + rank, -0.5], torch.float32).to(torch.float8_e4m3fn))
    return out.float()


@case("broadcast/float8_e5m2")
def _():
    t = on([3.0 * (rank + 1)]).to(torch.float8_e5m2)
    dist.broadcast(t, src=1)
    return t.float()


@case("all_reduce/sum_bfloat16")
def _():
    return reduced(torch.bfloat16, [1.5 + rank], dist.ReduceOp.SUM).float()


gloo = dist.new_group(backend="gloo")  # a group the user asked gloo for keeps gloo's rules, as on a GPU


@case("gloo_group/all_gather_into_tensor_flat")
def _():
    out = full((world * 6,), -1.0)
    dist.all_gather_into_tensor(out, x23, group=gloo)
    return out


dist.barrier()
report({"rank": rank, "backend": str(dist.get_backend()), "results": results})
dist.destroy_process_group()
