// Needs: Q_TEAM. Provides team_sum4.
// attn_prefill.wgsl's team sums through workgroup memory (4 KiB, two barriers), for adapters without
// subgroup operations or with subgroups narrower than a team. attn_team_subgroup.wgsl defines the
// same function with shuffles.

var<workgroup> team_part: array<vec4<f32>, 256>;

// The sums of v over the team of Q_TEAM consecutive invocations that lid belongs to, for every member.
// Every invocation of the workgroup must call it (it has barriers).
fn team_sum4(lid: u32, v: vec4<f32>) -> vec4<f32> {
    team_part[lid] = v;
    workgroupBarrier();
    let first = lid / Q_TEAM * Q_TEAM;
    var s = vec4<f32>(0.0);
    for (var i = 0u; i < Q_TEAM; i++) {
        s += team_part[first + i];
    }
    workgroupBarrier(); // before the next call writes team_part
    return s;
}
