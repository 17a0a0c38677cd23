// Needs: the SUBGROUP feature (subgroupAdd, subgroupShuffleXor). Provides team_sum2.
// Team sums with subgroup operations, for adapters that offer them (wgpu's SUBGROUP feature):
// a butterfly of shuffles inside each subgroup, then one workgroup-memory step across the
// subgroups of a team. Any subgroup size from 4 to 128 works; subgroup i is taken to hold the
// invocations i * size .. (i + 1) * size - 1, as drivers lay out a one-dimensional workgroup.
// reduce_shared.wgsl defines the same function without subgroups.

var<workgroup> team_part: array<vec2<f32>, 64>; // one per subgroup of a 256-invocation workgroup

// The sums of v over the aligned team of `team` consecutive invocations (a power of two that
// divides 256) that lid belongs to, for every invocation of the team. Every invocation of the
// workgroup must call it (it has a barrier), and a barrier must separate two calls.
fn team_sum2(lid: u32, v: vec2<f32>, team: u32) -> vec2<f32> {
    let size = subgroupAdd(1u); // every invocation is active here
    var s: vec2<f32>;
    if (team >= size) {
        s = subgroupAdd(v);
    } else {
        // Teams narrower than a subgroup: a butterfly within each.
        s = v;
        for (var o = 1u; o < team; o <<= 1u) {
            s += subgroupShuffleXor(s, o);
        }
    }
    if (lid % size == 0u) {
        team_part[lid / size] = s;
    }
    workgroupBarrier();
    if (team > size) {
        let per = team / size;
        let first = lid / team * per;
        s = vec2<f32>(0.0);
        for (var i = 0u; i < per; i++) {
            s += team_part[first + i];
        }
    }
    return s;
}
