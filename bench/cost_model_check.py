"""The SpMV cost model against measured candidates (evals/cost_model_check.py): each candidate's predicted and
measured time, their ratio, per matrix whether the model's fastest is the measured fastest, the offline
planner's first candidate (fresh store) against the fastest measured, and the same pick left one matrix out
(calibrated on the others' measurements, with the fitted efficiencies and with all of them at 1).
`python3 bench/cost_model_check.py [--cost-module FILE] [--measured JSON]`: FILE is another version of
tools/families/csr_spmv/cost.py to check instead, e.g. the model before session 10:
`git show cdf8572^:tools/families/csr_spmv/cost.py > /tmp/old_cost.py`; JSON another set of measured candidates, e.g.
the matrices the model was not fitted on: evals/results/issue14_h200/spmv_candidates_out_of_sample.json."""

from __future__ import annotations

import argparse
import importlib.util
import math
import tempfile
from pathlib import Path

from sparseditto.evals.cost_model_check import (MEASURED, cross_validated_picks, first_candidates, measured_features,
                                                neutral_price, priced_candidates)
from sparseditto.tools.families.csr_spmv.cost import predicted_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost-module", type=Path, help="a cost.py whose predicted_us to check instead")
    parser.add_argument("--measured", type=Path, default=MEASURED, help="the measured candidates to price")
    args = parser.parse_args()
    price = predicted_us
    if args.cost_module:
        spec = importlib.util.spec_from_file_location("cost_under_check", args.cost_module)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        price = module.predicted_us
    # the suite matrices written for the features are removed afterwards (the whole suite takes several GB)
    with tempfile.TemporaryDirectory(prefix="cost_check_") as folder:
        report(args.measured, args.cost_module, price, Path(folder))


def report(measured: Path, cost_module: Path | None, price, folder: Path) -> None:
    """The model against the measured candidates, the matrices written to `folder` for their features."""
    features = measured_features(folder, measured)
    priced = priced_candidates(features, measured, price=price)
    print(f"{'matrix':20s} {'kernel':22s} {'params':24s} {'predicted':>9s} {'measured':>9s} {'ratio':>6s}")
    for c, p in priced:
        params = ",".join(f"{k}={v}" for k, v in c["params"].items() if k in ("GROUP", "MAX_DIAGS", "ITEMS", "B"))
        print(f"{c['matrix']:20s} {c['kernel']:22s} {params:24s} {p:9.1f} {c['us']:9.1f} {c['us'] / p:6.2f}")
    ratios = [c["us"] / p for c, p in priced]
    print(f"\nmeasured / predicted: geometric mean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} candidates")
    for matrix in sorted({c["matrix"] for c, _ in priced}):
        mine = [(c, p) for c, p in priced if c["matrix"] == matrix]
        chosen, best = min(mine, key=lambda cp: cp[1])[0], min(mine, key=lambda cp: cp[0]["us"])[0]
        print(f"{matrix}: the model's fastest of the measured {chosen['kernel']} {chosen['params'].get('GROUP', '')} "
              f"({chosen['us']:.1f} us), measured fastest {best['kernel']} {best['params'].get('GROUP', '')} "
              f"({best['us']:.1f} us): {chosen['us'] / best['us']:.2f}x")

    if cost_module:  # the plan is this checkout's, whatever model was checked above
        return
    print("\nthe offline plan's first candidate (fresh store) against the fastest measured:")
    for name, kernel, start, us, best in first_candidates(folder, measured):
        params = ",".join(f"{k}={v}" for k, v in start.items() if k in ("GROUP", "MAX_DIAGS", "ITEMS", "B"))
        print(f"{name:20s} {kernel:22s} {params:14s} "
              + (f"{us:7.1f} us, {us / best:.2f}x the fastest measured ({best:.1f})" if us else "not measured"))
    for neutral, prices in ((False, priced), (True, priced_candidates(features, measured, price=neutral_price))):
        rows = cross_validated_picks(prices)
        within = sum(us <= 1.15 * best for _, _, us, best in rows)
        prices_with = "every efficiency at 1" if neutral else "the fitted efficiencies"
        geomean = math.exp(sum(math.log(us / best) for *_, us, best in rows) / len(rows))
        print(f"\nleft one matrix out, calibrated on the others' measurements ({prices_with}): within 15% on {within} "
              f"of {len(rows)}, geometric mean {geomean:.2f}x")
        for name, pick, us, best in rows:
            print(f"  {name:20s} {pick['kernel']:22s} GROUP={pick['params'].get('GROUP', '-')!s:3s} {us:7.1f} us, "
                  f"{us / best:.2f}x the fastest measured ({best:.1f})")


if __name__ == "__main__":
    main()
