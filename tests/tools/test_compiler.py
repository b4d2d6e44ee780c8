"""NVRTC compilation (no GPU needed) and parsing of ptxas's resource report."""

from __future__ import annotations

import sys
from pathlib import Path

from sparseditto.tools.compiler import complete_elf, compile_source, device_headers, nvrtc_available, parse_ptxas, toolchain

# recorded from compile_source(..., "sm_80", ...) on two kernels, one of them spilling
RECORDED_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spmm_csr_smem_tile' for 'sm_80'
ptxas info    : Function properties for spmm_csr_smem_tile
ptxas         .     8 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 8 bytes cumulative stack size, 396 bytes cmem[0]
ptxas info    : Compile time = 34.514 ms
ptxas info    : Compiling entry function 'tile_copy' for 'sm_80'
ptxas info    : Function properties for tile_copy
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 384 bytes smem, 372 bytes cmem[0]
ptxas info    : Compile time = 1.092 ms
"""


def test_parse_ptxas_reads_each_entry_point():
    res = parse_ptxas(RECORDED_LOG)
    assert set(res) == {"spmm_csr_smem_tile", "tile_copy"}
    tile = res["spmm_csr_smem_tile"]
    assert (tile.registers, tile.shared_bytes, tile.stack_bytes, tile.spill_stores, tile.spill_loads) == (64, 0, 8, 8, 12)
    copy = res["tile_copy"]
    assert (copy.registers, copy.shared_bytes, copy.stack_bytes, copy.spill_stores, copy.spill_loads) == (10, 384, 0, 0, 0)


def test_parse_ptxas_ignores_lines_before_any_entry_and_empty_logs():
    assert parse_ptxas("ptxas info    : 0 bytes gmem\nptxas info    : Used 12 registers\n") == {}
    assert parse_ptxas("") == {}


def test_nvrtc_is_available():
    assert nvrtc_available() is not None


def test_compile_source_reports_resources_and_a_cubin():
    src = ('extern "C" __global__ void scale(float* a, int n) {\n'
           '  __shared__ float s[64];\n'
           '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
           '  s[threadIdx.x % 64] = i < n ? a[i] : 0.f;\n'
           '  __syncthreads();\n'
           '  if (i < n) a[i] = 2.f * s[(threadIdx.x + 1) % 64];\n'
           '}\n')
    result = compile_source(src, "sm_90", [])
    assert result.ok
    assert result.cubin
    assert result.arch == "sm_90"
    assert "--gpu-architecture=sm_90" in result.options
    assert result.resources["scale"].registers > 0
    assert result.resources["scale"].shared_bytes == 256


def test_compile_error_is_a_result_not_an_exception():
    result = compile_source('extern "C" __global__ void k(float* a) { a[0] = undefined_thing; }', "sm_90", [])
    assert not result.ok
    assert result.cubin is None
    assert result.resources == {}
    assert "undefined_thing" in result.log


def test_defines_reach_the_source():
    src = 'extern "C" __global__ void k(float* a) { static_assert(TILE == 48, "TILE"); a[0] = TILE; }'
    assert compile_source(src, "sm_80", ["-DTILE=48"]).ok
    assert not compile_source(src, "sm_80", ["-DTILE=16"]).ok


def test_a_cubin_missing_its_last_byte_is_completed_from_its_headers():
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[0x20:0x30] = (64).to_bytes(8, "little") + (0).to_bytes(8, "little")  # program headers right after
    header[0x36:0x3E] = (56).to_bytes(2, "little") + (2).to_bytes(2, "little") + (64).to_bytes(2, "little") + (0).to_bytes(2, "little")
    full = bytes(header) + bytes(112)
    assert complete_elf(full[:-1]) == full
    assert complete_elf(full) == full
    assert complete_elf(b"not an elf") == b"not an elf"


# every header the static check allows, as a candidate would include them
ALLOWED_HEADERS_SOURCE = """\
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <mma.h>
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>
extern "C" __global__ void k(const __grid_constant__ CUtensorMap map, float* y) {
    static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) == 64, "CUtensorMap");
    y[threadIdx.x] = __half2float(__float2half(1.5f)) + float(cutlass::half_t(2.f));
}
"""


def test_device_headers_come_from_the_wheels_not_a_local_toolkit():
    headers = device_headers()
    assert headers.cuda and headers.cccl and headers.cutlass
    site = [Path(p).resolve() for p in sys.path if p.endswith("site-packages")]
    for folder in headers.include_dirs:
        assert "/usr/local/cuda" not in folder
        assert any(Path(folder).resolve().is_relative_to(s) for s in site), folder
    assert (Path(headers.cccl) / "cuda" / "barrier").is_file()
    assert (Path(headers.cutlass) / "cute" / "atom" / "mma_traits_sm90_gmma.hpp").is_file()


def test_every_allowed_header_compiles_and_cuda_h_gives_the_tensor_map_type():
    result = compile_source(ALLOWED_HEADERS_SOURCE, "sm_90a", [])
    assert result.ok, result.log[-2000:]
    assert all(f"-I{d}" in result.options for d in device_headers().include_dirs)


def test_toolchain_names_each_component_and_its_version():
    found = toolchain()
    assert set(found) == {"NVRTC", "CUDA device headers", "CCCL headers", "CUTLASS/CuTe headers"}
    assert all(found.values()), found
    assert found["CUTLASS/CuTe headers"].startswith("4.2.0.0 ")
