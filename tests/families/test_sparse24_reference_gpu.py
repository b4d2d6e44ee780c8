"""The 2:4 family's float64 reference on the GPU (cuBLAS DGEMM) for products large enough to leave the host: the same
numbers as the host's product (IEEE float64, another summation order), IEEE special values included, and no copy of
the product left readable in device memory afterwards."""

from __future__ import annotations

import numpy as np
import pytest

from sparseditto.tools.families.sparse24_gemm import GPU_REFERENCE_MIN_MACS, float64_product


@pytest.mark.gpu
def test_a_large_float64_product_on_the_gpu_matches_the_hosts():
    import cupy as cp

    rng = np.random.default_rng(0)
    n = 1024
    assert n ** 3 >= GPU_REFERENCE_MIN_MACS
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    A[3, 5], B[7, 9], A[11, 13] = np.inf, np.nan, -np.inf
    pool = cp.get_default_memory_pool()
    before = pool.used_bytes()
    got = float64_product(A, B)
    want = A @ B
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-9)
    assert pool.used_bytes() == before  # nothing held on the device
    # the blocks the product and its operands used come back from the pool: none holds the product
    reused = [cp.empty((n, n), dtype=cp.float64) for _ in range(3)]
    assert not any(np.array_equal(r.get()[finite], got[finite]) for r in reused)
