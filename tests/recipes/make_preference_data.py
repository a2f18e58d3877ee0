#!/usr/bin/env python3
# Writes N preference pairs whose preferred answer a program can check, for the alignment recipes'
# tests and numbers: the prompt asks to repeat a word, the chosen response repeats it, the rejected
# one says another word of the same list (so every word is chosen in some pairs and rejected in
# others: only copying the prompt's word explains the preferences). Held-out pairs use (word,
# distractor) combinations the training pairs never show. Half the records are {prompt, chosen,
# rejected} strings, half TRL's conversational form.
# Usage: make_preference_data.py TRAIN.jsonl HELDOUT.jsonl [N_TRAIN=400] [N_HELDOUT=100] [SEED=0]
# The check: a response is preferred when it equals the word after "Repeat the word:".
import json, random, sys

train_path, held_path = sys.argv[1], sys.argv[2]
n_train = int(sys.argv[3]) if len(sys.argv) > 3 else 400
n_held = int(sys.argv[4]) if len(sys.argv) > 4 else 100
r = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 0)
words = ["apple", "river", "stone", "cloud", "tiger", "bread", "music", "green", "house", "light",
         "paper", "glass", "horse", "money", "water", "chair", "dream", "earth", "field", "heart"]
combos = [(w, d) for w in words for d in words if w != d]
r.shuffle(combos)
held, train = combos[:n_held], combos[n_held:]


def record(w, d, i):
    prompt = "Repeat the word: " + w
    if i % 2 == 0:
        return {"prompt": prompt, "chosen": w, "rejected": d}
    user = [{"role": "user", "content": prompt}]
    return {"prompt": user, "chosen": [{"role": "assistant", "content": w}],
            "rejected": [{"role": "assistant", "content": d}]}


with open(train_path, "w") as f:
    for i in range(n_train):
        w, d = train[i % len(train)]
        f.write(json.dumps(record(w, d, i)) + "\n")
with open(held_path, "w") as f:
    for i, (w, d) in enumerate(held):
        f.write(json.dumps(record(w, d, i)) + "\n")
