#!/usr/bin/env bash
# The label guide's figures (docs/guides/labels.md#figures).
#
#   1. Cost: ROWS rows through the fake chat server with a label file of
#      about 1,500 tokens, the fake's prompt cache on (it reports the
#      repeated system message as usage.prompt_tokens_details.cached_tokens,
#      from 1,024 tokens in steps of 128, as OpenAI does), priced at
#      LiteLLM's gpt-4o-mini entry: with its cache_read_input_token_cost
#      (the discount read) and without it (every prompt token at the input
#      price: what the ledger charged before it read cached tokens).
#   2. Accuracy: the shared movie reviews (BENCH_DATA) with the oracle fake
#      (-chat-oracle: it answers each text its gold label), --labels alone
#      against a label file with descriptions and examples: accuracy,
#      prompt tokens a row, cost. The oracle reads neither the labels nor
#      the descriptions: the accuracy cannot differ, and it does not say
#      what descriptions do for a real model; what the run shows is the
#      price of the descriptions, and what the prompt cache gives back.
#
#   BENCH_DATA=/work/shared/data bench/labels.sh [ROWS]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rows=${1:-10000}
data=${BENCH_DATA:-../shared/data}/vader-icwsm2014
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# LiteLLM's gpt-4o-mini entry (model_prices_and_context_window.json), and
# the same without the cached rate.
cat >"$work/prices.json" <<'JSON'
{"gpt-4o-mini": {"max_input_tokens": 128000, "input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07,
  "input_cost_per_token_batches": 7.5e-08, "output_cost_per_token_batches": 3e-07, "cache_read_input_token_cost": 7.5e-08,
  "litellm_provider": "openai", "mode": "chat"}}
JSON
grep -v cache_read "$work/prices.json" | sed 's/"output_cost_per_token_batches": 3e-07,/"output_cost_per_token_batches": 3e-07/' >"$work/prices-nocache.json"

# A label file of about 1,500 tokens: three labels, each with a
# description and eight examples.
python3 - "$work/labels.yaml" <<'PY'
import sys
words = {"positive": "glad of the visit: on time, polite, the fault fixed, a fair bill",
         "negative": "unhappy with the visit: late, rude, the fault left unfixed, a mess, an unfair bill",
         "neutral": "asking a question or stating a fact, with no feeling about the service"}
out = ["task: Classify customer feedback on home repair visits by how the customer feels about the service.", "labels:"]
for name, what in words.items():
    out += [f"  - name: {name}", "    description: >",
            f"      The customer is {what}. " + " ".join(f"Read the whole text, not its first words: a {name} text may open with a complaint or a thank-you that the rest takes back." for _ in range(4))]
    out.append("    examples:")
    for i in range(8):
        out += [f"      - text: \"Example {i + 1} of a {name} text: the engineer came, looked at the boiler and the radiators, and the customer says so.\"",
                f"        reason: {what.split(':')[0]}, example {i + 1}"]
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
awk -v n="$rows" 'BEGIN { print "request_id,text"; for (i = 0; i < n; i++) printf "r%d,\"visit %d: the engineer came on time and fixed it\"\n", i, i }' >"$work/in.csv"

start_fake -chat -latency 1ms -chat-cache-min 1024
chat=(--provider chat --model gpt-4o-mini --endpoint "http://$(fake_addr)/v1/chat/completions" --no-cache --no-progress -c 32 --constrain off)
HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" "${chat[@]}" --labels-file "$work/labels.yaml" --prices "$work/prices.json" --dry-run 2>&1 | grep 'dry_run prefix'
for p in prices prices-nocache; do
  HF_TOKEN=hf_bench "$work/hfsent" classify "$work/in.csv" -o "$work/o.csv" "${chat[@]}" --labels-file "$work/labels.yaml" \
    --prices "$work/$p.json" --summary-json "$work/$p.sum.json" 2>"$work/$p.log"
done
stop_fake
python3 - "$work/prices.sum.json" "$work/prices-nocache.sum.json" "$rows" <<'PY'
import json, sys
a, b, rows = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
print(f"cost: {rows} rows, gpt-4o-mini prices, label file of ~{a['prompt_tokens'] // rows} prompt tokens a row")
print(f"  prompt_tokens={a['prompt_tokens']} cached_prompt_tokens={a['cached_prompt_tokens']} ({100 * a['cached_prompt_tokens'] / a['prompt_tokens']:.1f}%) completion_tokens={a['completion_tokens']}")
print(f"  with the discount read:    cost_usd={a['cost_usd']:.6f}")
print(f"  without (full input rate): cost_usd={b['cost_usd']:.6f}")
print(f"  saving: {100 * (1 - a['cost_usd'] / b['cost_usd']):.1f}%")
PY

if [[ -f $data/movie_reviews.csv ]]; then
  cp "$data/movie_reviews.csv" "$work/mv.csv"
  cat >"$work/movie.yaml" <<'YAML'
task: Classify a sentence from a movie review by the reviewer's opinion of the movie.
labels:
  - name: positive
    description: The reviewer likes the movie, or some part of it enough to recommend it; praise with a reservation is still positive.
    examples:
      - "A gorgeous, witty, seductive movie."
      - text: "Flawed, but the last hour makes up for it."
        reason: the praise outweighs the flaw
  - name: negative
    description: The reviewer dislikes the movie, or finds its flaws outweigh what is good in it; faint praise for a bad film is negative.
    examples:
      - "A dull, lifeless retread of a better film."
      - text: "The actors try hard, but nothing can save this script."
        reason: the effort does not save it
YAML
  start_fake -chat -latency 1ms -chat-cache-min 1024 -chat-oracle "$work/mv.csv"
  chat=(--provider chat --model gpt-4o-mini --endpoint "http://$(fake_addr)/v1/chat/completions" --no-cache --no-progress -c 32 --constrain off --prices "$work/prices.json" --gold-column gold)
  echo "accuracy: movie reviews ($(($(wc -l <"$work/mv.csv") - 1)) rows), the oracle fake"
  for how in "--labels positive,negative" "--labels-file $work/movie.yaml"; do
    # shellcheck disable=SC2086
    HF_TOKEN=hf_bench "$work/hfsent" classify "$work/mv.csv" -o "$work/mo.csv" "${chat[@]}" $how --summary-json "$work/m.json" 2>"$work/m.log" || true
    python3 - "$work/m.json" "${how%% *}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
q = s["quality"]
print(f"  {sys.argv[2]:14s} accuracy={q['accuracy']:.4f} prompt_tokens/row={s['prompt_tokens'] / s['rows']:.1f} "
      f"cached_prompt_tokens={s['cached_prompt_tokens']} cost_usd={s['cost_usd']:.6f}")
PY
  done
  stop_fake
else
  echo "accuracy: no $data/movie_reviews.csv (set BENCH_DATA): skipped"
fi
