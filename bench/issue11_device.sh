# Device run for issue 11 (family packages, contract v2). Usage on the GPU machine:
#   source bench/device_setup.sh && bash bench/issue11_device.sh tests|standard $OUT
# tests: every GPU test (contract v2 with TMA, cluster, fp8, float scalar and two outputs; the CuTe wgmma tile;
# every reference kernel); standard: the standard suite at budget 2, compared with evals/results/standard_h200.
set -u
what=$1; out=$2
case $what in
  tests)
    python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/gpu_tests_issue11_h200.txt" | tail -n 40
    ;;
  standard)
    start=$(date +%s)
    sparseditto eval standard --budget 2 --out "$out/standard_issue11_h200" 2>&1 | tail -n 25
    echo "suite took $(( $(date +%s) - start )) s"
    sparseditto eval compare evals/results/standard_h200 "$out/standard_issue11_h200" \
      --markdown "$out/standard_issue11_h200/compare_with_standard_h200.md" 2>&1 | tail -n 20
    ;;
esac
