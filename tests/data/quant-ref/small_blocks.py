# Weight blocks that hold every code of TQ1_0, TQ2_0, MXFP4, Q1_0, Q2_0 (raw bytes for
# loom-quant-ref --weights FILE), with scales from f16 subnormals to the largest finite f16.
# Usage: small_blocks.py TYPE OUT
import random, struct, sys
random.seed(42)
F16 = [0x3c00, 0x0001, 0x7bff, 0xbc00, 0x0000, 0x8000, 0x3555, 0x03ff, 0x2e66, 0xc900, 0x0400, 0x5640]
def f16(i): return struct.pack('<H', F16[i % len(F16)])
def sweep(nbytes, start):  # bytes start, start+1, ... mod 256
    return bytes((start + j) % 256 for j in range(nbytes))
out = bytearray()
t = sys.argv[1]
if t == 'q1_0':    # 128 elements: f16 d, 16 bytes of sign bits; 8 blocks (4 rows of 256), random then complemented
    rnd = [bytes(random.randrange(256) for _ in range(16)) for _ in range(4)]
    for b in range(8): out += f16(b) + (rnd[b] if b < 4 else bytes(255 - v for v in rnd[b - 4]))
elif t == 'q2_0':  # 64 elements: f16 d, 16 bytes of 2-bit codes; 16 blocks cover 0..255 (4 rows)
    for b in range(16): out += f16(b) + sweep(16, 16 * b)
elif t == 'tq2_0':  # 256 elements: 64 bytes of 2-bit codes, f16 d; 4 blocks cover 0..255
    for b in range(4): out += sweep(64, 64 * b) + f16(b)
elif t == 'tq1_0':  # 256 elements: 48 bytes of 5 trits, 4 bytes of 4 trits, f16 d; 8 blocks
    qh = [0, 1, 242, 243, 244, 255, 128, 127, 81, 162, 27, 200, 54, 100, 3, 9,
          250, 241, 80, 160, 26, 28, 2, 170, 85, 240, 245, 17, 33, 65, 129, 254]
    for b in range(8): out += sweep(48, 48 * b) + bytes(qh[4 * b:4 * b + 4]) + f16(b)
elif t == 'mxfp4':  # 32 elements: E8M0 e, 16 bytes of FP4 codes; 16 blocks cover 0..255 (2 rows)
    es = [0, 1, 2, 3, 100, 127, 128, 129, 150, 180, 200, 230, 60, 30, 10, 5]
    for b in range(16): out += bytes([es[b]]) + sweep(16, 16 * b)
else:
    sys.exit('unknown type ' + t)
open(sys.argv[2], 'wb').write(out)
