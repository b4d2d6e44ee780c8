"""Device probe for kernel contract v2 (standalone: does not import sparseditto).

Checks on the GPU what the runner relies on: the fixture kernel (fp8 A through a TMA tensor map passed by
value, a 2-CTA cluster with distributed shared memory, a float scalar, an int64 argument, two outputs)
compiled by NVRTC, launched through cuda-bindings' cuLaunchKernelEx on CuPy's function handle; the same
launch without the cluster attribute; the device clock attribute; and the host cost of one launch through
cuLaunchKernelEx against CuPy's own launch.
"""

import ctypes
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import cupy as cp
import ml_dtypes
import numpy as np
from cuda.bindings import driver as drv
from cupy.cuda import nvrtc

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "tests/fixtures/families/contract_v2_demo/kernels/demo_tma_cluster_scale.cu"
PRELUDE = ROOT / "knowledge_base/kernels/prelude.cuh"


def check(result):
    err, *rest = result
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"driver error {err}")
    return rest[0] if len(rest) == 1 else rest


def compile_cubin(src, options):
    prog = nvrtc.createProgram(src, "k.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["--gpu-architecture=sm_90a", "--std=c++17", *options])
    except nvrtc.NVRTCError:
        print(nvrtc.getProgramLog(prog))
        raise
    cubin = nvrtc.getCUBIN(prog)
    path = Path(tempfile.mkdtemp()) / "k.cubin"
    path.write_bytes(cubin)
    return cp.RawModule(path=str(path))


def encode_2d(arr, box):
    rows, cols = arr.shape
    return check(drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, arr.data.ptr,
        [drv.cuuint64_t(cols), drv.cuuint64_t(rows)], [drv.cuuint64_t(cols * arr.itemsize)],
        [drv.cuuint32_t(b) for b in box], [drv.cuuint32_t(1), drv.cuuint32_t(1)], drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE, drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))


class Params:
    """The kernelParams array: one pointer per argument to a host copy of its value."""

    def __init__(self, values):
        self.values = values
        self.ptrs = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])

    @property
    def address(self):
        return ctypes.addressof(self.ptrs)


def config(grid, block, cluster, smem=0):
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = smem
    cfg.hStream = drv.CUstream(cp.cuda.get_current_stream().ptr)
    if cluster:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    else:
        cfg.numAttrs = 0
    return cfg


def demo(dtype_code, M, K, BM, BK, cluster=True):
    body = re.sub(r"^/\*---\n.*?\n---\*/\n", "", KERNEL.read_text(), flags=re.S)
    module = compile_cubin(PRELUDE.read_text() + "\n" + body, [f"-DSD_DTYPE={dtype_code}", f"-DBM={BM}", f"-DBK={BK}"])
    fn = module.get_function("scale_rowsum")
    rng = np.random.default_rng(1)
    a8 = rng.uniform(-4, 4, size=(M, K)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    scale = np.float32(rng.uniform(0.5, 2.0))
    A = cp.asarray(a8.view(np.uint8))
    ytype = {0: np.float32, 1: np.float16, 2: np.uint16}[dtype_code]
    Y = cp.full((M, K), 0x7F, dtype=ytype) if dtype_code else cp.full((M, K), np.nan, dtype=np.float32)
    rowsum = cp.full(M, np.nan, dtype=np.float32)
    tmap = encode_2d(A, (BK, BM))
    tbuf = (ctypes.c_uint64 * 16)()
    ctypes.memmove(tbuf, tmap.getPtr(), 128)
    params = Params([tbuf, ctypes.c_void_p(Y.data.ptr), ctypes.c_void_p(rowsum.data.ptr), ctypes.c_float(scale),
                     ctypes.c_int32(M), ctypes.c_int64(K)])
    grid = (2 * -(-M // BM), 1, 1)
    cfg = config(grid, (128, 1, 1), (2, 1, 1) if cluster else None)
    err = drv.cuLaunchKernelEx(cfg, drv.CUfunction(fn.kernel.ptr), params.address, 0)[0]
    try:
        cp.cuda.Device().synchronize()
    except Exception as exc:  # noqa: BLE001
        return {"launch": str(err), "sync_error": str(exc)}
    ref64 = a8.astype(np.float64) * float(scale)
    y = Y.get()
    y64 = y.view(ml_dtypes.bfloat16).astype(np.float64) if dtype_code == 2 else y.astype(np.float64)
    r = rowsum.get().astype(np.float64)
    return {"launch": str(err), "dtype": dtype_code, "M": M, "K": K, "BM": BM, "BK": BK, "cluster": cluster,
            "y_rel_err": float(np.linalg.norm(y64 - ref64) / np.linalg.norm(ref64)),
            "rowsum_rel_err": float(np.linalg.norm(r - ref64.sum(1)) / np.linalg.norm(ref64.sum(1))),
            "y_nonfinite": int((~np.isfinite(y64)).sum()), "rowsum_nonfinite": int((~np.isfinite(r)).sum())}


def launch_overhead(n=2000):
    module = cp.RawModule(code='extern "C" __global__ void noop(float* p, int n) { if (n < 0) p[0] = 1.f; }')
    fn = module.get_function("noop")
    buf = cp.empty(1, dtype=cp.float32)
    out = {}
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(n):
            fn((1, 1, 1), (32, 1, 1), (buf, np.int32(1)))
        cp.cuda.Device().synchronize()
        out["cupy_us"] = (time.perf_counter() - t0) / n * 1e6
        params = Params([ctypes.c_void_p(buf.data.ptr), ctypes.c_int32(1)])
        cfg = config((1, 1, 1), (32, 1, 1), None)
        f = drv.CUfunction(fn.kernel.ptr)
        t0 = time.perf_counter()
        for _ in range(n):
            drv.cuLaunchKernelEx(cfg, f, params.address, 0)
        cp.cuda.Device().synchronize()
        out["launch_ex_us"] = (time.perf_counter() - t0) / n * 1e6
        cfg2 = config((2, 1, 1), (32, 1, 1), (2, 1, 1))
        t0 = time.perf_counter()
        for _ in range(n):
            drv.cuLaunchKernelEx(cfg2, f, params.address, 0)
        cp.cuda.Device().synchronize()
        out["launch_ex_cluster_us"] = (time.perf_counter() - t0) / n * 1e6
    return out


def big_dynamic_smem(nbytes=100 * 1024):
    """More than 48 KiB of dynamic shared memory: CuPy raises the function's limit, cuLaunchKernelEx launches."""
    module = cp.RawModule(code='extern "C" __global__ void fill(float* out, int n) { extern __shared__ float s[];'
                          ' for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i; __syncthreads();'
                          ' if (threadIdx.x == 0) out[0] = s[n - 1]; }')
    fn = module.get_function("fill")
    fn.max_dynamic_shared_size_bytes = nbytes
    out = cp.zeros(1, dtype=cp.float32)
    n = nbytes // 4
    params = Params([ctypes.c_void_p(out.data.ptr), ctypes.c_int32(n)])
    err = drv.cuLaunchKernelEx(config((1, 1, 1), (256, 1, 1), (1, 1, 1), nbytes), drv.CUfunction(fn.kernel.ptr), params.address, 0)[0]
    cp.cuda.Device().synchronize()
    return {"launch": str(err), "value": float(out.get()[0]), "expected": float(n - 1)}


def indivisible_cluster():
    module = cp.RawModule(code='extern "C" __global__ void noop2(int n) { }')
    fn = module.get_function("noop2")
    params = Params([ctypes.c_int32(1)])
    err = drv.cuLaunchKernelEx(config((3, 1, 1), (32, 1, 1), (2, 1, 1)), drv.CUfunction(fn.kernel.ptr), params.address, 0)[0]
    cp.cuda.Device().synchronize()
    return {"grid_3_cluster_2": str(err)}


def attempt(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - the probe reports every failure and goes on
        return {"error": f"{type(exc).__name__}: {exc}"}


def main():
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    info = {"name": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
            "cc": (props["major"], props["minor"]), "sms": props["multiProcessorCount"],
            "props_has_clockRate": "clockRate" in props, "props_clockRate": props.get("clockRate"),
            "attr_clock_khz": cp.cuda.runtime.deviceGetAttribute(13, dev.id),
            "smem_optin": props.get("sharedMemPerBlockOptin"), "regs_per_sm": props.get("regsPerMultiprocessor"),
            "regs_per_block": props.get("regsPerBlock"),
            "driver": cp.cuda.runtime.driverGetVersion(), "cuda_bindings": __import__("cuda.bindings").bindings.__version__}
    print(json.dumps(info), flush=True)
    for args in [(1, 300, 272, 64, 128), (0, 257, 512, 32, 64), (2, 64, 128, 64, 64), (1, 1000, 1008, 64, 128)]:
        print(json.dumps(attempt(demo, *args)), flush=True)
    print(json.dumps(attempt(launch_overhead)), flush=True)
    print(json.dumps(attempt(big_dynamic_smem)), flush=True)
    print(json.dumps(attempt(indivisible_cluster)), flush=True)
    # last: without the cluster attribute the kernel's peer read is invalid and may break the context
    print(json.dumps(attempt(demo, 1, 300, 272, 64, 128, cluster=False)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
