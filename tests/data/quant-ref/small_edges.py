# Edge rows (N=256 f32) for the quantizer section of the small types' -codes.qref files
# (tests/data/quant-ref/README.md). Usage: small_edges.py OUT.f32
import random, struct, sys
random.seed(27)
N = 256
def f32(x): return struct.unpack('<f', struct.pack('<f', x))[0]
def bits(u): return struct.unpack('<f', struct.pack('<I', u))[0]
def nextbelow(x): return bits(struct.unpack('<I', struct.pack('<f', x))[0] - 1)
def nextabove(x): return bits(struct.unpack('<I', struct.pack('<f', x))[0] + 1)
rows = []
def chunked(make):  # 8 chunks of 32, chunk c made by make(c)
    r = []
    for c in range(8): r += make(c)
    rows.append(r)
def g(s=1.0): return random.gauss(0, 1) * s
# 1. per-chunk maxima at powers of two and their neighbours (MXFP4 exponent boundaries)
for base in (4.0, 1.0, 2.0 ** -20, 2.0 ** 20):
    def mk(c, base=base):
        m = [base, nextbelow(base), nextabove(base), base * 1.5, nextbelow(base * 2), base * 0.75, base * 3, nextabove(base * 0.5)][c]
        v = [g(m * 0.3) for _ in range(32)]
        v[random.randrange(32)] = m if c % 2 == 0 else -m
        return [max(-m, min(m, x)) for x in v]
    chunked(mk)
# 2. exact ties: FP4 levels' midpoints at d = 0.5 (amax 6), halves of amax (TQ / Q2_0)
ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0]
rows.append([(1 if i % 2 else -1) * ties[(i // 2) % 8] for i in range(N)])
rows.append([[0.5, -0.5, 1.0, -1.0, 0.0, 0.25, -0.25, 0.75][i % 8] for i in range(N)])
# 3. signed zeros and negatives only (Q1_0 signs)
rows.append([(-0.0 if i % 3 == 0 else (0.0 if i % 3 == 1 else -abs(g()))) for i in range(N)])
rows.append([-0.0] * N)
# 4. tiny: smallest normal, subnormal maxima (their reciprocal overflows), lone subnormals
def tiny(c):
    m = [2.0 ** -126, 2.0 ** -125, 2.0 ** -124, 1e-39, 1e-42, 1.4e-45, 2.0 ** -127, 3e-38][c]
    return [m * random.choice([-1, -0.5, 0, 0.5, 1, 0.3]) for _ in range(32)]
chunked(tiny)
rows.append([1e-40 * random.choice([-1, 1, 0.5, -0.25, 0]) for _ in range(N)])
rows.append([1e-44 if i == 7 else 0.0 for i in range(N)])
# 5. large but f16-finite maxima, and float extremes (MXFP4 scales up to 2^125)
rows.append([g(1e4) for _ in range(N - 1)] + [65504.0])
rows.append([max(-65504.0, min(65504.0, g(3e4))) for _ in range(N)])
def large(c):
    m = [1e30, 3e38, 1e20, 2.0 ** 100, 65504.0, 65519.0, 1e10, 2.0 ** 127][c]
    return [m * random.choice([-1, 1, 0.5, 0.1, -0.3, 0]) for _ in range(32)]
chunked(large)
# 6. one huge value among small ones, per chunk and per row
rows.append([g(1e-3) if i != 100 else 1e4 for i in range(N)])
rows.append([g() if i != 3 else -5e4 for i in range(N)])
# 7. Gaussian with per-chunk scale
chunked(lambda c: [g(10.0 ** (c - 4)) for _ in range(32)])
with open(sys.argv[1], 'wb') as f:
    for r in rows:
        assert len(r) == N, len(r)
        f.write(struct.pack('<%df' % N, *r))
print(len(rows), 'rows')
