"""The `launch.py` a 2:4 GEMM run folder gets: the accepted kernel sequence on the user's own compressed arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparseditto.tools.launch_script import RUNTIME, launch_table, main_block

if TYPE_CHECKING:
    from sparseditto.tools.contract import KernelCandidate
    from sparseditto.spec import SpecBase


def sparse24_launcher(candidate: KernelCandidate, spec: SpecBase, arch: str, out_dtype: str, act: int) -> str:
    """`act` is the kernels' activation code of the spec's epilogue (the family's ACTIVATIONS)."""
    epilogue = spec.epilogue
    storage = {"fp16": "cupy.float16", "bf16": "cupy.uint16 (bf16 bits)", "fp8_e4m3": "cupy.uint8 (e4m3 bits)"}[spec.dtype]
    out_storage = "cp.float16" if out_dtype == "fp16" else "cp.uint16"
    usage = (f"usage: python launch.py [--help]\n\n"
             f"This file is a module: `from launch import run` in your own code (the folder on sys.path), then\n"
             f"  C = run(A_values, A_meta, B{', bias' if epilogue.bias else ''}{', alpha=...' if epilogue.alpha else ''})\n"
             f"with CuPy arrays on the GPU: A_values (M, K/2) and B (K, N) {storage}, A_meta (M*K/32,) int32 in the\n"
             f"layout of sparseditto.tools.families.sparse24_gemm.compression (compress() makes both from a pruned\n"
             f"matrix){', bias (M,) ' + out_dtype if epilogue.bias else ''}; C is (M, N) {out_dtype}, row-major. M is a\n"
             f"multiple of 16 and K of 64. kernel.cu sits next to it (NVRTC compiles it at the first call, for {arch}).\n"
             f"Without CuPy or a CUDA device, run() raises NoCudaDevice.")
    if candidate.tensor_maps or any(tuple(k.cluster) != ("1", "1", "1") for k in candidate.kernels):
        # TMA tensor maps are passed by value and clusters set at launch: the harness's own driver launch does both
        usage += ("\nIts kernels take TMA tensor maps or run in thread-block clusters, which CuPy cannot launch: "
                  "run() launches them through SparseDitto's driver path (the sparseditto package must be installed).")
        launch_body = f'''    from sparseditto.tools.contract import KernelCandidate
    from sparseditto.tools.kernel_launch import launch_candidate

    value_types = {{"A_values": {spec.dtype!r}, "A_meta": "int32", "B": {spec.dtype!r}}}  # as the harness names them
    launch_candidate(KernelCandidate.model_validate_json(CANDIDATE), _module, buffers,
                     {{k: v for k, v in s.items() if k not in PARAMS}}, scalars, {spec.dtype!r}, value_types)'''
        embedded = f"\nCANDIDATE = {candidate.model_dump_json()!r}\n"
    else:
        launch_body = '''    for name, (kind, size) in WORKSPACE.items():
        buffers[name] = cp.empty(size(s), dtype={"fp32": cp.float32, "int32": cp.int32}[kind])
    for entry, grid, block, smem, args in LAUNCHES:
        fn = _module.get_function(entry)
        if smem(s) > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem(s)
        fn(grid(s), block(s), tuple(buffers[a] if a in buffers else scalars[a] if a in scalars else np.int32(s[a])
                                    for a in args), shared_mem=smem(s))'''
        embedded = ""
    return f'''"""Run {candidate.label()} on your own 2:4 compressed matrix with CuPy.

    from launch import run
    C = run(A_values, A_meta, B{", bias" if epilogue.bias else ""})   # C = {"act(" if act else ""}{"alpha * " if epilogue.alpha else ""}A B{" + bias" if epilogue.bias else ""}{")" if act else ""}

Needs CuPy and a CUDA device; `python launch.py --help` says how to call it.
"""
{RUNTIME}

PARAMS = {dict(candidate.parameters)!r}
OPTIONS = ("--gpu-architecture={arch}", "--std=c++17")  # kernel.cu defines the parameters and the value type
SOURCE = (Path(__file__).parent / "kernel.cu").read_text()
ACT = {act}{embedded}


def ceil_div(a, b):
    return -(-a // b)


{launch_table(candidate)}

_module = None


def run(A_values, A_meta, B, bias=None, alpha=1.0):
    """One call of the kernel sequence. Raises NoCudaDevice without CuPy or a CUDA device."""
    global _module
    if _module is None:
        require_device()
        _module = cp.RawModule(code=SOURCE, options=OPTIONS, backend="nvrtc")
    M, K, N = A_values.shape[0], B.shape[0], B.shape[1]
    C = cp.empty((M, N), dtype={out_storage})
    s = {{"M": M, "K": K, "N": N, "nnz": M * K // 2, "has_bias": int(bias is not None), "act": ACT,
         "value_bytes": B.dtype.itemsize, "num_sms": cp.cuda.Device().attributes["MultiProcessorCount"], **PARAMS}}
    buffers = {{"A_values": A_values, "A_meta": A_meta, "B": B, "C": C,
               "bias": bias if bias is not None else cp.zeros(1, dtype=cp.int32)}}
    scalars = {{"alpha": np.float32(alpha)}}
{launch_body}
    return C


{main_block(usage)}'''
