// Needs: the SUBGROUP feature (subgroupShuffleXor), Q_TEAM. Provides team_sum4.
// attn_prefill.wgsl's team sums with subgroup shuffles, for adapters whose subgroups hold at least
// Q_TEAM invocations: a butterfly inside each team of Q_TEAM consecutive invocations (a subgroup holds
// whole teams: it is taken to hold invocations i * size .. (i + 1) * size - 1, as drivers lay out a
// one-dimensional workgroup). attn_team_shared.wgsl defines the same function without subgroups.

// The sums of v over the team of Q_TEAM consecutive invocations that lid belongs to, for every member.
// Every invocation of the subgroup must call it.
fn team_sum4(lid: u32, v: vec4<f32>) -> vec4<f32> {
    var s = v;
    for (var o = 1u; o < Q_TEAM; o <<= 1u) {
        s += subgroupShuffleXor(s, o);
    }
    return s;
}
