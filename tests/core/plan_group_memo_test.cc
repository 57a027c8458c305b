// The single-hop guard's tries share the groups of like tensors they do not
// change (plan/group_memo.h, docs/planner.md §7).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../../bench/model_cases.h"
#include "plan/context.h"
#include "plan/group_memo.h"
#include "reshard/plan.h"

namespace reshard {
namespace {

// The 405B-shaped FSDP -> DP x TP8 case (bench/model_cases.h, 2 layers, 256
// devices, 8 a host: its norms relay inside hosts) has 7 groups of like
// tensors, each accounted by per-cell arithmetic. Tried single-hop one kind
// at a time, as Context::decide_single_hop tries its groups from the routed
// plan, the statistics with the memo equal those accounted in place (the
// oracle), and the memo computes each group once routed and once
// single-hop: 14 groups for 7 tries, where in place every try computes all
// 7 (49).
TEST(PlanGroupMemo, GuardTriesComputeEachGroupOnce) {
  bench::ModelShape m;
  m.layers = 2;
  const PlanInput in = bench::transformer_case(m, 256, 0, 256, 8, 8);
  const std::vector<std::vector<std::string>> kinds = {{"embed", "lm_head"},
                                                       {"wq"},
                                                       {"wk", "wv"},
                                                       {"wo"},
                                                       {"w1", "w3"},
                                                       {"w2"},
                                                       {"attn_norm", "mlp_norm", "final_norm"}};
  auto of_kind = [&](const std::string& name, size_t k) {
    const std::string last = name.substr(name.rfind('.') + 1);
    for (const std::string& s : kinds[k])
      if (last == s) return true;
    return false;
  };
  planning::Context ctx(in);
  ctx.build();
  planning::GroupMemo memo;
  int64_t computed[2] = {0, 0};
  bool forwarded = false;
  for (size_t k = 0; k < kinds.size(); ++k) {
    for (size_t i = 0; i < ctx.tensors.size(); ++i)
      ctx.tensors[i].single_hop = of_kind(in.tensors[i].name, k);
    PlanStats st[2];
    for (int on : {0, 1}) {
      ctx.group_memo = on == 1 ? &memo : nullptr;
      const int64_t before = planning::tiled_groups_computed();
      planning::compute_stats(ctx, st[on], ctx.staging_options(), false, nullptr, -1);
      computed[on] += planning::tiled_groups_computed() - before;
    }
    ctx.group_memo = nullptr;
    SCOPED_TRACE("kind " + kinds[k].front() + " single-hop");
    EXPECT_EQ(st[1].cost_seconds, st[0].cost_seconds);
    EXPECT_EQ(st[1].stages, st[0].stages);
    EXPECT_EQ(st[1].pieces, st[0].pieces);
    EXPECT_EQ(st[1].messages, st[0].messages);
    EXPECT_EQ(st[1].network_bytes, st[0].network_bytes);
    EXPECT_EQ(st[1].local_bytes, st[0].local_bytes);
    EXPECT_EQ(st[1].forwarded_bytes, st[0].forwarded_bytes);
    EXPECT_EQ(st[1].cross_host_bytes, st[0].cross_host_bytes);
    EXPECT_EQ(st[1].cross_process_bytes, st[0].cross_process_bytes);
    EXPECT_EQ(st[1].max_send_bytes, st[0].max_send_bytes);
    EXPECT_EQ(st[1].max_recv_bytes, st[0].max_recv_bytes);
    EXPECT_EQ(st[1].max_host_send_bytes, st[0].max_host_send_bytes);
    EXPECT_EQ(st[1].max_host_recv_bytes, st[0].max_host_recv_bytes);
    ASSERT_EQ(st[1].per_device.size(), st[0].per_device.size());
    for (size_t d = 0; d < st[0].per_device.size(); ++d) {
      const DeviceTraffic &a = st[1].per_device[d], &b = st[0].per_device[d];
      EXPECT_EQ(a.send_bytes, b.send_bytes) << "device " << d;
      EXPECT_EQ(a.recv_bytes, b.recv_bytes) << "device " << d;
      EXPECT_EQ(a.local_bytes, b.local_bytes) << "device " << d;
      EXPECT_EQ(a.send_messages, b.send_messages) << "device " << d;
      EXPECT_EQ(a.recv_messages, b.recv_messages) << "device " << d;
    }
    forwarded |= st[0].forwarded_bytes > 0 && st[0].stages == 2;
  }
  std::printf("groups computed: %ld in place, %ld with the memo\n", static_cast<long>(computed[0]),
              static_cast<long>(computed[1]));
  EXPECT_TRUE(forwarded);  // relays inside hosts: stage-1 rows and pairs merged
  EXPECT_EQ(computed[0], 49);
  EXPECT_EQ(computed[1], 14);
}

}  // namespace
}  // namespace reshard
