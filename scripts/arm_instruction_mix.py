#!/usr/bin/env python3
"""Instruction mix of loom's AArch64 packed kernels beside llama.cpp's, per unit of work.

A unit is one weight row x one 32-weight block x one activation row (a 32-column block's dot
product). Each kernel's innermost loop (the smallest backward branch around its SDOT / SMMLA) is
taken from `aarch64-linux-gnu-objdump -d`, its instructions counted by class, and divided by the
units one iteration computes; for the super-block types the instructions of the enclosing loop
(once per 256 columns) are spread over its units too. With llvm-mca installed the loop bodies are
also run through its scheduling models (cycles per unit; L1 hits assumed, so decode's real bound,
memory bandwidth, is not in it). docs/arm.md has the results and how to read them.

  scripts/arm_instruction_mix.py [--llama ~/.cache/loom-llama-cpp/src] [--mca cortex-a55,cortex-a76,apple-m1]

Compiles src/quant/packed_neon.cpp as the build does (-O3 -ffp-contract=off, no -march: the
kernels carry their target attributes) and llama.cpp's ggml-cpu/arch/arm/{repack.cpp,quants.c}
with -O3 -march=armv8.2-a+dotprod+i8mm (its kernels are selected by those macros); for F16 its
ggml-cpu/vec.cpp with that -march and with -march=armv8.2-a+fp16, and llamafile/sgemm.cpp with
the latter.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (type, path, label, object, function regex, units per inner iteration, inner trips per outer
# iteration, units per outer iteration (0: no outer part counted))
Q40 = r'Blocks32\{true\}'
Q80 = r'Blocks32\{\}'
MX4 = r'Blocks32\{true, false, false, true, true\}'  # MXFP4: IQ4_NL's tile, MXFP4's table
NIB0 = r'\(loom::quant::detail::neon_[a-z0-9]+::\(anonymous namespace\)::Nib256\)0'
KERNELS = [
    ('Q4_0', 'decode', 'loom dotprod (16 rows x 1)', 'loom', r'neon_dot::.*sdot_pass<1, [^>]*' + Q40, 16, 1, 0),
    ('Q4_0', 'decode', 'llama.cpp gemv_q4_0_4x4_q8_0', 'repack', r'^ggml_gemv_q4_0_4x4_q8_0$', 4, 1, 0),
    ('Q4_0', 'decode', 'llama.cpp vec_dot_q4_0_q8_0 (row)', 'quants', r'^ggml_vec_dot_q4_0_q8_0$', 2, 1, 0),
    ('Q4_0', 'prompt', 'loom i8mm (4 rows x 8, SMMLA)', 'loom', r'neon_i8mm::.*mmla_pass<4, [^>]*' + Q40 + r', 0, 1, false>', 32, 1, 0),
    ('Q4_0', 'prompt', 'loom dotprod (8 rows x 4, SDOT)', 'loom', r'neon_dot::.*sdot_panels<4, [^>]*' + Q40 + r', 0, 2, false>', 32, 1, 0),
    ('Q4_0', 'prompt', 'llama.cpp gemm_q4_0_4x8_q8_0 (SMMLA)', 'repack', r'^ggml_gemm_q4_0_4x8_q8_0$', 16, 1, 0),
    ('Q4_0', 'prompt', 'llama.cpp gemm_q4_0_4x4_q8_0 (SDOT)', 'repack', r'^ggml_gemm_q4_0_4x4_q8_0$', 16, 1, 0),
    ('Q8_0', 'decode', 'loom dotprod (16 rows x 1)', 'loom', r'neon_dot::.*sdot_pass<1, [^>]*' + Q80, 16, 1, 0),
    ('Q8_0', 'decode', 'loom i8mm (16 rows x 1, SDOT)', 'loom', r'neon_i8mm::.*sdot_pass<1, [^>]*' + Q80, 16, 1, 0),
    ('Q8_0', 'decode', 'llama.cpp gemv_q8_0_4x4_q8_0', 'repack', r'^ggml_gemv_q8_0_4x4_q8_0$', 4, 1, 0),
    ('Q8_0', 'decode', 'llama.cpp vec_dot_q8_0_q8_0 (row)', 'quants', r'^ggml_vec_dot_q8_0_q8_0$', 2, 1, 0),
    ('Q8_0', 'prompt', 'loom i8mm (4 rows x 8, SMMLA)', 'loom', r'neon_i8mm::.*mmla_pass<4, [^>]*' + Q80 + r', 0, 1, false>', 32, 1, 0),
    ('Q8_0', 'prompt', 'loom dotprod (8 rows x 4, SDOT)', 'loom', r'neon_dot::.*sdot_panels<4, [^>]*' + Q80 + r', 0, 2, false>', 32, 1, 0),
    ('Q8_0', 'prompt', 'llama.cpp gemm_q8_0_4x8_q8_0 (SMMLA)', 'repack', r'^ggml_gemm_q8_0_4x8_q8_0$', 16, 1, 0),
    ('Q8_0', 'prompt', 'llama.cpp gemm_q8_0_4x4_q8_0 (SDOT)', 'repack', r'^ggml_gemm_q8_0_4x4_q8_0$', 16, 1, 0),
    ('MXFP4', 'decode', 'loom dotprod (16 rows x 1)', 'loom', r'neon_dot::.*sdot_pass<1, [^>]*' + MX4, 16, 1, 0),
    ('MXFP4', 'decode', 'llama.cpp gemv_mxfp4_4x4_q8_0', 'repack', r'^ggml_gemv_mxfp4_4x4_q8_0$', 4, 1, 0),
    ('MXFP4', 'decode', 'llama.cpp vec_dot_mxfp4_q8_0 (row)', 'quants', r'^ggml_vec_dot_mxfp4_q8_0$', 2, 1, 0),
    ('MXFP4', 'prompt', 'loom i8mm (4 rows x 8, SMMLA)', 'loom', r'neon_i8mm::.*mmla_pass<4, [^>]*' + MX4 + r', 0, 1, false>', 32, 1, 0),
    ('MXFP4', 'prompt', 'loom dotprod (8 rows x 4, SDOT)', 'loom', r'neon_dot::.*sdot_panels<4, [^>]*' + MX4 + r', 0, 2, false>', 32, 1, 0),
    ('MXFP4', 'prompt', 'llama.cpp gemm_mxfp4_4x4_q8_0 (SDOT)', 'repack', r'^ggml_gemm_mxfp4_4x4_q8_0$', 16, 1, 0),
    ('Q4_K', 'decode', 'loom dotprod (16 rows x 1)', 'loom', r'neon_dot::.*q4k_pass<1, 0, 4, ' + NIB0, 32, 4, 128),
    ('Q4_K', 'decode', 'llama.cpp gemv_q4_K_8x4_q8_K', 'repack', r'^ggml_gemv_q4_K_8x4_q8_K$', 16, 4, 64),
    ('Q4_K', 'decode', 'llama.cpp gemv_q4_K_8x8_q8_K', 'repack', r'^ggml_gemv_q4_K_8x8_q8_K$', 16, 4, 64),
    ('Q4_K', 'decode', 'llama.cpp vec_dot_q4_K_q8_K (row)', 'quants', r'^ggml_vec_dot_q4_K_q8_K$', 8, 1, 0),
    ('Q4_K', 'prompt', 'loom i8mm (4 rows x 8, SMMLA)', 'loom', r'neon_i8mm::.*q4k_mmla<4, 1, ' + NIB0, 256, 1, 0),
    ('Q4_K', 'prompt', 'loom dotprod (4 rows x 4, SDOT)', 'loom', r'neon_dot::.*q4k_pass<4, 0, 1, ' + NIB0, 32, 4, 128),
    ('Q4_K', 'prompt', 'llama.cpp gemm_q4_K_8x8_q8_K (SMMLA)', 'repack', r'^ggml_gemm_q4_K_8x8_q8_K$', 64, 4, 256),
    ('Q4_K', 'prompt', 'llama.cpp gemm_q4_K_8x4_q8_K (SDOT)', 'repack', r'^ggml_gemm_q4_K_8x4_q8_K$', 64, 4, 256),
    # F16: the multiply-adds are the "dot" column (FMLA / FMLAL / FMLAL2) and units = 0 counts the
    # loop's units from their lanes (a .4s FMLA or FMLAL is 4 multiply-adds, a .8h FMLA 8; 32 per unit).
    ('F16', 'decode', 'loom FCVTL + FMLA (16 rows x 1)', 'loom', r'neon_dot::.*f16_pass<1, false>', 0, 1, 0, 'f16'),
    ('F16', 'decode', 'loom FMLAL (16 rows x 1, FEAT_FHM)', 'loom', r'neon_plain::.*f16_fhm_pass<1>', 0, 1, 0, 'f16'),
    ('F16', 'decode', 'llama.cpp vec_dot_f16 (row, FP16 arithmetic: f16 sums)', 'vec_fp16', r'^ggml_vec_dot_f16$', 0, 1, 0, 'f16'),
    ('F16', 'decode', 'llama.cpp vec_dot_f16 (row, no FP16: FCVTL + FMLA)', 'vec', r'^ggml_vec_dot_f16$', 0, 1, 0, 'f16'),
    ('F16', 'prompt', 'loom FCVTL + FMLA (16 rows x 4)', 'loom', r'neon_dot::.*f16_pass<4, false>', 0, 1, 0, 'f16'),
    ('F16', 'prompt', 'loom FMLAL (16 rows x 4, FEAT_FHM)', 'loom', r'neon_plain::.*f16_fhm_pass<4>', 0, 1, 0, 'f16'),
    ('F16', 'prompt', 'llama.cpp tinyBLAS gemm_bloc<4, 6> (f16 sums)', 'sgemm_fp16',
     r'tinyBLAS<8, __Float16x8_t, __Float16x8_t, unsigned short, unsigned short, float>::gemm_bloc<4, 6>', 0, 1, 0, 'f16'),
]

INT_OPS = re.compile(r'^(sdot|udot|usdot|sudot|smmla|ummla|usmmla)$')
F16_OPS = re.compile(r'^(fmla|fmlal|fmlal2)$')
DOT_OPS = INT_OPS


def parse(listing):
    funcs, cur = collections.OrderedDict(), None
    for line in listing.splitlines():
        m = re.match(r'^([0-9a-f]+) <(.*)>:$', line)
        if m:
            cur = m.group(2)
            funcs[cur] = []
            continue
        m = re.match(r'^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$', line)
        if m and cur is not None:
            funcs[cur].append((int(m.group(1), 16), m.group(2), m.group(3).split('//')[0].strip()))
    return funcs


def is_branch(op):
    return op == 'b' or op.startswith('b.') or op in ('cbz', 'cbnz', 'tbz', 'tbnz')


def loops(ins):
    for addr, op, args in ins:
        if not is_branch(op):
            continue
        t = re.match(r'([0-9a-f]+)\b', args if op in ('b',) or op.startswith('b.') else args.split(',')[-1].strip())
        if t and int(t.group(1), 16) <= addr:
            tgt = int(t.group(1), 16)
            yield tgt, addr, [x for x in ins if tgt <= x[0] <= addr]


def innermost(ins):
    best = None
    for tgt, addr, body in loops(ins):
        if any(DOT_OPS.match(op) for _, op, _ in body) and (best is None or len(body) < len(best[2])):
            best = (tgt, addr, body)
    if not best:
        return None, 0
    outer = None
    for tgt, addr, body in loops(ins):
        if tgt <= best[0] and addr >= best[1] and (tgt, addr) != best[:2] and (outer is None or len(body) < len(outer)):
            outer = body
    return best[2], (len(outer) - len(best[2])) if outer else 0


def klass(op, args):
    if DOT_OPS.match(op):
        return 'dot'
    if op.startswith('prfm'):
        return 'prefetch'
    if op.startswith('ld'):
        return 'load'
    if op.startswith('st'):
        return 'store'
    if is_branch(op):
        return 'branch'
    if re.search(r'\bv\d+\.', args) or re.search(r'\b[qdsh]\d+\b', args):
        return 'float' if op.startswith('f') or op in ('scvtf', 'ucvtf') else 'simd'
    return 'scalar'


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--llama', default=os.path.expanduser('~/.cache/loom-llama-cpp/src'))
    ap.add_argument('--mca', default='cortex-a55,cortex-a76,apple-m1')
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    objs = {}
    cxx, cc = 'aarch64-linux-gnu-g++', 'aarch64-linux-gnu-gcc'
    run([cxx, '-std=c++20', '-O3', '-DNDEBUG', '-ffp-contract=off', '-I' + os.path.join(ROOT, 'src'), '-I' + os.path.join(ROOT, 'include'),
         '-c', os.path.join(ROOT, 'src/quant/packed_neon.cpp'), '-o', os.path.join(tmp, 'loom.o')])
    objs['loom'] = os.path.join(tmp, 'loom.o')
    g = os.path.join(args.llama, 'ggml')
    inc = ['-I' + os.path.join(g, 'include'), '-I' + os.path.join(g, 'src'), '-I' + os.path.join(g, 'src/ggml-cpu')]
    for name, comp in (('repack', cxx), ('quants', cc)):
        src = os.path.join(g, 'src/ggml-cpu/arch/arm', name + ('.cpp' if name == 'repack' else '.c'))
        run([comp, '-O3', '-march=armv8.2-a+dotprod+i8mm'] + inc + ['-c', src, '-o', os.path.join(tmp, name + '.o')])
        objs[name] = os.path.join(tmp, name + '.o')
    # F16: ggml_vec_dot_f16 (decode; activations converted to f16) with and without FP16 vector
    # arithmetic (+fp16: FMLA .8h, sums in f16; else FCVTL + FMLA .4s), and tinyBLAS (llamafile's
    # sgemm: prompt runs of 8 rows and more, FP16 arithmetic only).
    for name, src, march in (('vec', 'vec.cpp', 'armv8.2-a+dotprod+i8mm'), ('vec_fp16', 'vec.cpp', 'armv8.2-a+fp16'),
                             ('sgemm_fp16', 'llamafile/sgemm.cpp', 'armv8.2-a+fp16')):
        run([cxx, '-std=c++17', '-O3', '-march=' + march] + inc + ['-c', os.path.join(g, 'src/ggml-cpu', src), '-o',
                                                                     os.path.join(tmp, name + '.o')])
        objs[name] = os.path.join(tmp, name + '.o')
    funcs = {k: parse(run(['aarch64-linux-gnu-objdump', '-d', '--no-show-raw-insn', '-C', v])) for k, v in objs.items()}
    have_mca = subprocess.run(['which', 'llvm-mca'], capture_output=True).returncode == 0
    cpus = [c for c in args.mca.split(',') if c] if have_mca else []
    head = f"| type | path | kernel | instr/unit | dot | load | simd | float | other |" + ''.join(f" {c} cyc/unit |" for c in cpus)
    print(head)
    print('|' + '---|' * (head.count('|') - 1))
    global DOT_OPS
    for typ, path, label, obj, fre, units, trips, outer_units, *ops in KERNELS:
        DOT_OPS = F16_OPS if ops == ['f16'] else INT_OPS
        names = [n for n in funcs[obj] if re.search(fre, n)]
        if not names:
            print(f'| {typ} | {path} | {label} | (not found: {fre}) |', file=sys.stderr)
            continue
        body, extra = innermost(funcs[obj][names[0]])
        if body is None:
            continue
        if units == 0:  # multiply-adds by lanes (the destination's arrangement), 32 per unit
            lanes = {'4s': 4, '2s': 2, '8h': 8, '4h': 4}
            units = sum(lanes.get(re.search(r'\.(\w+)', a).group(1), 0) for _, op, a in body if DOT_OPS.match(op)) / 32
        if outer_units:
            per = (len(body) * trips + extra) / outer_units
            scale = trips / outer_units
        else:
            per, scale = len(body) / units, 1 / units
        mix = collections.Counter(klass(op, a) for _, op, a in body)
        other = mix['scalar'] + mix['branch'] + mix['store'] + mix['prefetch']
        row = (f"| {typ} | {path} | {label} | {per:.2f} | {mix['dot'] * scale:.2f} | {mix['load'] * scale:.2f} | "
               f"{mix['simd'] * scale:.2f} | {mix['float'] * scale:.2f} | {other * scale:.2f} |")
        for c in cpus:
            asm = os.path.join(tmp, 'loop.s')
            with open(asm, 'w') as f:
                for _, op, a in body:
                    if not is_branch(op):
                        f.write('\t%s\t%s\n' % (op, re.sub(r'\s*<.*>', '', a)))
            out = subprocess.run(['llvm-mca', '-mtriple=aarch64', '-mcpu=' + c, '-mattr=+dotprod,+i8mm,+fullfp16,+fp16fml',
                                  '-iterations=100', asm], capture_output=True, text=True).stdout
            m = re.search(r'Total Cycles:\s+(\d+)', out)
            row += f" {int(m.group(1)) / 100 * scale:.2f} |" if m else ' - |'
        print(row)


if __name__ == '__main__':
    main()
