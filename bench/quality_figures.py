#!/usr/bin/env python3
"""Quality figures of a results file against its gold labels, computed as a
reader would, without hfsent (bench/quality.sh):

  ECE        ten bins of equal width on the score as written; the mean of
             |accuracy - mean score| weighted by rows (rows without a score
             left out);
  top 30%    the accuracy of the 30% of rows with the highest scores (the
             first ceil(0.3 n) after a stable sort by score, descending),
             against the whole set's;
  kept@0.95  the largest share of rows kept above a score threshold whose
             accuracy is 0.95 or more (the lowest such threshold).

Rows compared: outcome success and a non-blank gold label; labels compared
with spaces trimmed and case folded.

  quality_figures.py RESULTS GOLD NAME
"""
import csv
import math
import sys


def main(results, gold_path, name):
    with open(gold_path, newline="") as f:
        gold = {r["request_id"].strip(): r["gold"] for r in csv.DictReader(f)}
    rows = []
    with open(results, newline="") as f:
        for r in csv.DictReader(f):
            g = gold.get(r["request_id"].strip(), "").strip().casefold()
            label = r["label"]
            if label[:1] == "'" and label[1:2] in ("=", "+", "-", "@", "\t", "\r", "'"):
                label = label[1:]
            if r["outcome"] != "success" or not g:
                continue
            score = float(r["score"]) if r["score"] != "" else None
            rows.append((score, label.strip().casefold() == g))
    n = len(rows)
    acc = sum(ok for _, ok in rows) / n
    scored = [(s, ok) for s, ok in rows if s is not None]
    bins = [[0, 0.0, 0] for _ in range(10)]
    for s, ok in scored:
        b = min(int(round(s * 1e4)) * 10 // 10000, 9)
        bins[b][0] += 1
        bins[b][1] += s
        bins[b][2] += ok
    ece = sum(c / len(scored) * abs(k / c - t / c) for c, t, k in bins if c)
    ranked = sorted(scored, key=lambda r: -r[0])
    top = ranked[: math.ceil(0.3 * n)]
    top_acc = sum(ok for _, ok in top) / len(top)
    kept, right, best = 0, 0, 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            kept += 1
            right += ranked[j][1]
            j += 1
        if right / kept >= 0.95:
            best = kept / n
        i = j
    print(f"   {name:6s} rows={n} accuracy={acc:.4f} ece={ece:.4f} top30%_accuracy={top_acc:.4f} kept_at_0.95={best:.4f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
