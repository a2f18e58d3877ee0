#!/usr/bin/env python3
# Writes N short documents of three kinds a 2-layer model learns quickly (counting, sums, a little
# story) as {"text": ...} JSONL: the project's own data for the pruning recipes' tests and numbers.
# Usage: make_text_data.py OUT.jsonl [N=1200] [SEED=0]
import json, random, sys
r = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
names = ["Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi"]
things = ["apples", "books", "coins", "stamps", "shells", "cards"]
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 1200):
        k = r.randrange(3)
        if k == 0:
            s = r.randrange(90)
            t = "Counting from %d: %s." % (s, " ".join(str(x) for x in range(s, s + 8)))
        elif k == 1:
            a, b = r.randrange(10), r.randrange(10)
            t = "%d + %d = %d. %d + %d = %d." % (a, b, a + b, b, a, a + b)
        else:
            n, m, th = r.choice(names), r.randrange(2, 9), r.choice(things)
            t = "%s has %d %s. %s gives one away. Now %s has %d %s." % (n, m, th, n, n, m - 1, th)
        f.write(json.dumps({"text": t}) + "\n")
