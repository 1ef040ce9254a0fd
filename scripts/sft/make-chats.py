#!/usr/bin/env python3
"""Write a small supervised fine-tuning set in the messages format of TRL,
axolotl and OpenAI: questions with exact answers (sums, products, capitals,
opposites, spelling, counting), every assistant reply in one fixed persona and
format:

    Ahoy! <answer>. Arr, Captain Toy.

A model that learned it starts every reply with "Ahoy!" and ends it with
"Arr, Captain Toy." (`toy generate --chat`), and its held-out assistant loss
falls. Deterministic for a seed; train and held-out files share no question.

    python3 scripts/sft/make-chats.py OUT_DIR [--n 400] [--seed 1]
writes OUT_DIR/train.jsonl and OUT_DIR/heldout.jsonl (10%).
"""

import argparse
import json
import os
import random

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon", "Japan": "Tokyo",
    "Canada": "Ottawa", "Egypt": "Cairo", "Kenya": "Nairobi", "Peru": "Lima", "Chile": "Santiago", "Norway": "Oslo",
    "Sweden": "Stockholm", "Finland": "Helsinki", "Poland": "Warsaw", "Greece": "Athens", "Ireland": "Dublin",
    "Austria": "Vienna", "Hungary": "Budapest", "Cuba": "Havana", "Russia": "Moscow", "China": "Beijing",
    "India": "New Delhi", "Thailand": "Bangkok", "Vietnam": "Hanoi", "Argentina": "Buenos Aires", "Mexico": "Mexico City",
    "Australia": "Canberra", "Turkey": "Ankara", "Denmark": "Copenhagen", "Belgium": "Brussels", "Netherlands": "Amsterdam",
}
OPPOSITES = {
    "hot": "cold", "big": "small", "fast": "slow", "happy": "sad", "light": "dark", "up": "down", "early": "late",
    "open": "closed", "full": "empty", "young": "old", "loud": "quiet", "hard": "soft", "wet": "dry", "strong": "weak",
    "high": "low", "rich": "poor", "near": "far", "thick": "thin", "clean": "dirty", "brave": "afraid",
}
WORDS = ["ship", "anchor", "parrot", "island", "treasure", "compass", "ocean", "harbor", "sail", "cannon", "lantern",
         "rope", "map", "storm", "coral", "whale", "pearl", "deck", "mast", "barrel"]
SYSTEM = ["You are Captain Toy, a cheerful pirate.", "You are a helpful assistant.", None, None]


def qa(r):
    """One (question, answer) pair."""
    kind = r.randrange(6)
    if kind == 0:
        a, b = r.randrange(2, 60), r.randrange(2, 60)
        return r.choice(["What is {} plus {}?", "Add {} and {}.", "How much is {} + {}?"]).format(a, b), f"{a} plus {b} is {a + b}"
    if kind == 1:
        a, b = r.randrange(2, 13), r.randrange(2, 13)
        return r.choice(["What is {} times {}?", "Multiply {} by {}.", "How much is {} x {}?"]).format(a, b), f"{a} times {b} is {a * b}"
    if kind == 2:
        c = r.choice(sorted(CAPITALS))
        return r.choice(["What is the capital of {}?", "Which city is the capital of {}?", "Name the capital of {}."]).format(c), \
            f"The capital of {c} is {CAPITALS[c]}"
    if kind == 3:
        w = r.choice(sorted(OPPOSITES))
        return r.choice(["What is the opposite of {}?", "Give me the opposite of the word {}."]).format(w), \
            f"The opposite of {w} is {OPPOSITES[w]}"
    if kind == 4:
        w = r.choice(WORDS)
        return r.choice(["How do you spell {}?", "Spell the word {}."]).format(w), f"{w} is spelled {'-'.join(w.upper())}"
    w = r.choice(WORDS)
    return r.choice(["How many letters are in the word {}?", "Count the letters of {}."]).format(w), f"{w} has {len(w)} letters"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    r = random.Random(a.seed)
    seen, records = set(), []
    while len(records) < a.n:
        q, ans = qa(r)
        if q in seen:
            continue
        seen.add(q)
        sys = r.choice(SYSTEM)
        msgs = ([{"role": "system", "content": sys}] if sys else []) + [
            {"role": "user", "content": q}, {"role": "assistant", "content": f"Ahoy! {ans}. Arr, Captain Toy."}]
        records.append({"messages": msgs})
    os.makedirs(a.out, exist_ok=True)
    held = len(records) // 10
    for name, part in [("heldout.jsonl", records[:held]), ("train.jsonl", records[held:])]:
        with open(os.path.join(a.out, name), "w") as f:
            for rec in part:
                f.write(json.dumps(rec) + "\n")
    print(f"{len(records) - held} training and {held} held-out conversations in {a.out}")


if __name__ == "__main__":
    main()
