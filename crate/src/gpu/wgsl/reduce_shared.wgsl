// Needs: nothing. Provides team_sum2.
// Team sums through workgroup memory (a tree of barrier steps): the variant for adapters without
// subgroup operations. reduce_subgroup.wgsl defines the same function with them.

var<workgroup> team_part: array<vec2<f32>, 256>;

// The sums of v over the aligned team of `team` consecutive invocations (a power of two that
// divides 256) that lid belongs to, for every invocation of the team. Every invocation of the
// workgroup must call it (it has barriers), and a barrier must separate two calls.
fn team_sum2(lid: u32, v: vec2<f32>, team: u32) -> vec2<f32> {
    team_part[lid] = v;
    workgroupBarrier();
    for (var s = team / 2u; s > 0u; s >>= 1u) {
        if (lid % team < s) {
            team_part[lid] += team_part[lid + s];
        }
        workgroupBarrier();
    }
    return team_part[lid - lid % team];
}
