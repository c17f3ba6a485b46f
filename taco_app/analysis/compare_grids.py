"""Two grids of the same cells under two configs, side by side: for every (algorithm, size,
seed) that both directories hold, task accuracy in each, their paired difference on the same
test tasks and alignment in each; then per algorithm and size the mean difference over the
seeds with its interval (spec/evaluation.md eq. (13), as `taco report`'s paired table does
between two algorithms; on the Dial, whose test PINs share one keypad, the PINs count as their
distinct key moves, eq. (14)).

Cells of one seed share their test tasks (the same PINs and episode seeds) and, where both
grids collected their data with the same code, their data: the script checks the data
fingerprints the cell files record and says where they differ. It reads cell files only.

    python -m taco_app.analysis.compare_grids results/dial-image-small-trained-core results/dial-image-small \
        --labels "core trained" "core frozen"
"""
import argparse
import os

from taco_app import report, stats

from taco_app.grid import store as cells_mod
from taco_ref import evaluate

IDENT = ("algo", "size", "seed")


def _cells(out_dir):
    """{(algo, size, seed): cell record} of out_dir's cell files (one domain)."""
    found = {}
    for record in cells_mod.load_cells(out_dir):
        cell = record["cell"]
        found[tuple(cell[k] for k in IDENT)] = record
    return found


def compare(dir_a, dir_b):
    """(rows, means): rows, one per cell both directories hold, of (algo, size, seed, task a,
    task b, (difference, lo, hi), align a, align b, same data); means, one per (algo, size), of
    (algo, size, mean difference, lo, hi, seeds), in points. The alignment is the forward
    argmax's (the paper's table)."""
    a, b = _cells(dir_a), _cells(dir_b)
    rows = []
    for ident in sorted(set(a) & set(b), key=lambda i: (report.ALGOS.index(i[0]), i[1], i[2])):
        fa, fb = a[ident]["figures"], b[ident]["figures"]
        if len(fa["outcomes"]) != len(fb["outcomes"]):
            raise ValueError(f"{ident}: {len(fa['outcomes'])} test tasks in {dir_a}, "
                             f"{len(fb['outcomes'])} in {dir_b}: not the same tasks")
        d = evaluate.paired_difference_interval(fa["outcomes"], fb["outcomes"],
                                                effective=report.effective_tasks(cells_mod.flat(a[ident])))
        same = a[ident]["data"] == b[ident]["data"]
        rows.append((*ident, 100 * fa["task_accuracy"], 100 * fb["task_accuracy"],
                     tuple(100 * x for x in d), 100 * fa["align_forward_argmax"],
                     100 * fb["align_forward_argmax"], same))
    means = []
    for algo, size in dict.fromkeys((r[0], r[1]) for r in rows):
        mine = [r[:3] for r in rows if (r[0], r[1]) == (algo, size)]
        pairs = [(a[i]["figures"]["outcomes"], b[i]["figures"]["outcomes"]) for i in mine]
        effective = [report.effective_tasks(cells_mod.flat(a[i])) for i in mine]
        mean, lo, hi = stats.seeds_difference_interval(pairs, None if None in effective else effective)
        means.append((algo, size, 100 * mean, float("nan") if lo is None else 100 * lo,
                      float("nan") if hi is None else 100 * hi, len(pairs)))
    return rows, means


def markdown(rows, means, labels):
    la, lb = labels
    out = [f"| algorithm | demos | seed | task acc., {la} | {lb} | {la} − {lb}, paired [95 %] "
           f"| align (fwd argmax), {la} | {lb} |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for algo, size, seed, ta, tb, (d, lo, hi), aa, ab, same in rows:
        flag = "" if same else " (other data)"
        out.append(f"| {report.LABELS[algo]} | {size} | {seed}{flag} | {ta:.1f} | {tb:.1f} "
                   f"| {d:+.1f} [{lo:+.1f}, {hi:+.1f}] | {aa:.1f} | {ab:.1f} |")
    out += ["", f"| algorithm | demos | {la} − {lb}, mean over seeds [95 % interval] |", "|---|---:|---:|"]
    for algo, size, mean, lo, hi, n in means:
        spread = f" [{lo:+.1f}, {hi:+.1f}]" if n > 1 else ""
        out.append(f"| {report.LABELS[algo]} | {size} | {mean:+.1f}{spread} ({n} seed{'s' * (n > 1)}) |")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m taco_app.analysis.compare_grids", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir_a", help="a results directory (OUT of taco experiment)")
    parser.add_argument("dir_b", help="the other one, same domain")
    parser.add_argument("--labels", nargs=2, default=None, metavar=("A", "B"),
                        help="column names (default: the directories)")
    args = parser.parse_args(argv)
    for d in (args.dir_a, args.dir_b):
        if not os.path.isdir(d):
            parser.error(f"{d}: no such directory")
    rows, means = compare(args.dir_a, args.dir_b)
    if not rows:
        parser.error(f"{args.dir_a} and {args.dir_b} hold no cell in common")
    print(markdown(rows, means, args.labels or (args.dir_a, args.dir_b)))


if __name__ == "__main__":
    main()
