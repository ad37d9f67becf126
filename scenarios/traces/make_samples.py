#!/usr/bin/env python3
"""Write the small SYNTHETIC sample traces in this directory.

Every prompt is at least 500 tokens long: with a calibrated (not exact) prompt sizer a
prompt lands within a few tokens of its length, which is within 1 % from there on.

These files imitate the column layout and units of published traces (Mooncake, Azure LLM
inference, BurstGPT, Qwen Bailian) and of anvil-load's own trace JSONL, so that the replay can be
tried and tested without downloading anything. They are NOT the real traces: every row is drawn
here from a fixed seed. Run it again to regenerate them byte for byte:

    python3 scenarios/traces/make_samples.py
"""
import datetime
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
NOTE = "synthetic sample, not the real trace; made by make_samples.py"


def write(name, lines):
    with open(os.path.join(HERE, name), "w", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def blocks(n, size):
    return -(-n // size)


def mooncake(rng):
    """JSONL: timestamp (ms since the first request), input_length, output_length, hash_ids of
    512-token blocks. Four 'documents' whose leading blocks are shared by later requests."""
    docs = [list(range(base, base + rng.randint(2, 5))) for base in (100, 200, 300, 400)]
    next_id = 1000
    rows, t = [], 0
    for i in range(40):
        doc = docs[i % 4]
        shared = doc[: rng.randint(1, len(doc))]
        input_length = len(shared) * 512 + rng.randint(100, 900)
        ids = list(shared)
        while len(ids) < blocks(input_length, 512):
            ids.append(next_id)
            next_id += 1
        rows.append({"timestamp": t, "input_length": input_length,
                     "output_length": rng.randint(8, 48), "hash_ids": ids})
        # Mooncake's clock ticks coarsely; a gap of at least 250 ms keeps sharing rows apart.
        t += rng.choice([250, 400, 600, 1000, 1500])
    write("mooncake-sample.jsonl", [json.dumps(r) for r in rows])


def azure(rng):
    """CSV: TIMESTAMP (datetime, 7 fractional digits), ContextTokens, GeneratedTokens."""
    start = datetime.datetime(2023, 11, 16, 18, 15, 46, 680590)
    lines, t = ["TIMESTAMP,ContextTokens,GeneratedTokens"], 0.0
    for _ in range(40):
        stamp = start + datetime.timedelta(seconds=t)
        text = stamp.strftime("%Y-%m-%d %H:%M:%S.%f") + str(rng.randint(0, 9))
        lines.append("%s,%d,%d" % (text, rng.randint(500, 3000), rng.randint(4, 64)))
        t += rng.expovariate(1.5)
    write("azure-sample.csv", lines)


def burstgpt(rng):
    """CSV: Timestamp (s), Model, Request tokens, Response tokens, Total tokens, Log Type.
    Failed requests have 0 response tokens."""
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    t = 0
    for i in range(40):
        request = rng.randint(500, 2500)
        response = 0 if i % 9 == 4 else rng.randint(4, 64)
        model = rng.choice(["ChatGPT", "GPT-4"])
        log = rng.choice(["Conversation log", "API log"])
        lines.append("%d,%s,%d,%d,%d,%s" % (t, model, request, response, request + response, log))
        t += rng.choice([0, 1, 1, 2, 3])
    write("burstgpt-sample.csv", lines)


def bailian(rng):
    """JSONL: chat_id, parent_chat_id (-1 first), timestamp (s), input_length (history included),
    output_length, type, turn, hash_ids of 16-token blocks; a turn's blocks extend the previous
    turn's."""
    rows, chat_id = [], 5000
    sessions = []
    for s in range(8):
        start = s * 1.3
        turns, t, history, ids, parent, previous = rng.randint(2, 5), start, [], [], -1, 0
        for turn in range(1, turns + 1):
            new = rng.randint(500, 900) if turn == 1 else rng.randint(40, 400)
            output = rng.randint(8, 40)
            input_length = sum(history) + new
            need = blocks(input_length, 16)
            base = 100000 * (s + 1) + 1000 * turn
            # The previous prompt's full blocks carry over; the rest is new to this turn.
            keep = ids[: previous // 16]
            ids = keep + [base + k for k in range(need - len(keep))]
            sessions.append({"chat_id": chat_id, "parent_chat_id": parent, "timestamp": round(t, 3),
                             "input_length": input_length, "output_length": output, "type": "text",
                             "turn": turn, "hash_ids": ids})
            history.append(new)
            history.append(output)
            previous = input_length
            parent = chat_id
            chat_id += 1
            t += rng.uniform(1.0, 4.0)
    sessions.sort(key=lambda r: (r["timestamp"], r["chat_id"]))
    write("bailian-sample.jsonl", [json.dumps(r) for r in sessions])


def own(rng):
    """anvil-load's own JSONL: offset_ms, input_tokens, output_tokens, hash_ids (64-token blocks,
    the scenario's block_size), session, turn."""
    rows, t = [], 0
    for i in range(30):
        session = "s%d" % (i % 6)
        turn = i // 6 + 1
        input_tokens = rng.randint(500, 1500)
        ids = [7, 8] + [10000 + 100 * i + k for k in range(blocks(input_tokens, 64) - 2)]
        rows.append({"offset_ms": t, "input_tokens": input_tokens, "output_tokens": rng.randint(8, 40),
                     "hash_ids": ids, "session": session, "turn": turn})
        t += rng.choice([150, 300, 450])
    write("own-sample.jsonl", [json.dumps(r) for r in rows])


def main():
    for name, make in [("mooncake", mooncake), ("azure", azure), ("burstgpt", burstgpt),
                       ("bailian", bailian), ("own", own)]:
        make(random.Random("anvil-load sample " + name))


if __name__ == "__main__":
    main()
