# Device run: bench/explore_kernels.py on each spec in its own process (a crashing variant loses only its
# spec), full output under OUT/explore/<spec>/, the summary lines last.
# Usage on the GPU machine: source bench/device_setup.sh && bash bench/explore_all.sh $OUT SPEC...
set -u
out=$1; shift
for spec in "$@"; do
  name=$(basename "$spec" .yaml)
  mkdir -p "$out/explore/$name"
  timeout 280 python3 bench/explore_kernels.py "$out/explore/$name" "$spec" > "$out/explore/$name/log.txt" 2>&1 \
    || echo "$name: exit $?" >> "$out/explore/failures.txt"
done
for spec in "$@"; do
  name=$(basename "$spec" .yaml)
  grep -A3 SUMMARY "$out/explore/$name/log.txt" | tail -n +2 || tail -5 "$out/explore/$name/log.txt"
done
