import sys, re, collections
f = sys.argv[1]
incl = collections.Counter(); selfc = collections.Counter(); total = 0
for line in open(f):
    line = line.rstrip()
    if not line: continue
    stack, _, cnt = line.rpartition(" ")
    cnt = int(cnt); total += cnt
    frames = stack.split(";")
    seen = set()
    for fr in frames:
        key = re.sub(r":\d+\)", ")", fr)
        if key not in seen:
            incl[key] += cnt; seen.add(key)
    selfc[re.sub(r":\d+\)", ")", frames[-1])] += cnt
print("total", total)
print("--- inclusive")
for k, v in incl.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 60):
    print(f"{100*v/total:5.1f}% {k[:150]}")
print("--- self")
for k, v in selfc.most_common(40):
    print(f"{100*v/total:5.1f}% {k[:150]}")
