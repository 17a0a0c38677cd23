# Writes the kv_record fuzz target's seeds (valid chained page records, framed as the target reads them):
#   python3 fuzz/seeds/make_kv_record_seeds.py fuzz/seeds/kv_record [fuzz/seeds/session_state]
import hashlib, struct, zlib, sys, random
L, D, P = 2, 4, 16
model = bytes(32)
def key(parts):
    h = hashlib.sha256()
    for p in parts: h.update(p)
    return h.digest()[:16]
root = key([b"root", model])
def record(parent, tokens, rng):
    k = key([b"page", parent, b"".join(struct.pack("<I", t) for t in tokens)])
    out = b"RVLLMKV\0" + struct.pack("<5I", 1, 1, L, D, P) + model + k + parent
    out += b"".join(struct.pack("<I", t) for t in tokens)
    out += bytes(rng.getrandbits(8) for _ in range(L * 2 * P * D * 2))
    return k, out + struct.pack("<I", zlib.crc32(out))
rng = random.Random(1)
chain, parent = [], root
for i in range(3):
    parent, r = record(parent, [rng.randrange(50000) for _ in range(P)], rng)
    chain.append(r)
def framed(rs): return b"".join(struct.pack("<I", len(r)) + r for r in rs)
open(sys.argv[1] + "/chain3", "wb").write(framed(chain))
open(sys.argv[1] + "/one", "wb").write(framed(chain[:1]))
open(sys.argv[1] + "/gap", "wb").write(framed([chain[0], chain[2]]))

# A saved conversation of 5 tokens for the session_state target (2 layers, rows of 4; memory/state.rs's format):
#   python3 fuzz/seeds/make_kv_record_seeds.py fuzz/seeds/kv_record fuzz/seeds/session_state
if len(sys.argv) > 2:
    n = 5
    out = b"RVLLMST\0" + struct.pack("<5I", 1, 1, L, D, n) + model + b"".join(struct.pack("<I", t) for t in range(n))
    out += bytes(rng.getrandbits(8) for _ in range(L * 2 * n * D * 2))
    open(sys.argv[2] + "/five", "wb").write(out + struct.pack("<I", zlib.crc32(out)))
