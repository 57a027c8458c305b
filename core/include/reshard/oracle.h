// reshard — the verification oracle (docs/design.md §9.1): deterministic source
// data whose values encode their own global index, and a check of every
// destination element against it. Used by `reshard verify`, the tests, the
// C ABI and the multi-process runners.
//
// Values. For tensor t (its position in the plan) and global row-major
// element index i, let k = i + salt(t) (the salt tells tensors apart when
// their pieces travel fused in one message).
//  - A source that is not partial holds the bit pattern k mod 2^bits of the
//    dtype (bool: k mod 2); float patterns that would be NaN or infinity have
//    their top exponent bit cleared, so every value is finite.
//  - A partial source holds summands that reduce, exactly and in any order,
//    to a known value: small integers the dtype represents exactly (for sum,
//    each summand in [-B, B] with B = (largest exact integer) / summands;
//    for max/min, one summand holds the value and the others hold something
//    smaller/larger). f16/bf16/f8 results are exact whether accumulated in
//    f32 or in the dtype.
// A destination that is not partial must then equal the reduced value
// element by element (bit for bit when the source is not partial either). A
// partial destination is checked by reducing its summands per element with
// its own op (replicas of one summand must agree).
//
// Thread safety: all functions are pure; distinct buffers may be filled or
// checked concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reshard/buffers.h"
#include "reshard/plan.h"

namespace reshard {

// Owned shard buffers for every tensor of a plan, indexed [tensor][entry] in
// layout entry order (the order execute_host expects).
struct OracleBuffers {
  std::vector<std::vector<std::vector<std::byte>>> src;
  std::vector<std::vector<std::vector<std::byte>>> dst;
  // Views for execute_host; valid while this object lives unchanged.
  std::vector<TensorBuffers> views();
};

// Bytes of every source and destination shard of `plan` (saturating at
// INT64_MAX): what fill_sources allocates.
int64_t oracle_buffer_bytes(const Plan& plan);

// Allocates every source and destination shard of `plan` (which must hold
// every tensor's layouts; parts are not needed), fills the sources and
// poisons the destinations so that an element nobody writes cannot pass.
// `max_bytes` bounds oracle_buffer_bytes(plan), checked before allocating
// anything: 0 is default_max_plan_bytes() (half the memory), -1
// (kUnlimitedPlanBytes) no limit, below -1 kInvalidArgument. Throws
// kResourceExhausted above the limit, kOutOfMemory when allocation fails.
OracleBuffers fill_sources(const Plan& plan, int64_t max_bytes = 0);

// Fills one source shard: `out` must hold exactly the bytes of entry
// `entry` of `tensor.src` (throws kInvalidArgument otherwise).
// `tensor_index` is the tensor's position in the plan (it salts the values).
void fill_source_shard(const TensorSpec& tensor, uint32_t tensor_index, size_t entry,
                       std::span<std::byte> out);
// Poisons one destination shard so that unwritten elements fail the check.
void poison_destination_shard(const TensorSpec& tensor, uint32_t tensor_index, size_t entry,
                              std::span<std::byte> out);
// poison_destination_shard for tensors[tensor_index] of a plan's tensors: a
// scale tensor's shard gets the complement of its reference scales (a
// one-byte e8m0 scale could otherwise be poisoned with its right value).
void poison_plan_destination_shard(std::span<const TensorSpec> tensors, uint32_t tensor_index,
                                   size_t entry, std::span<std::byte> out);

struct OracleMismatch {
  std::string tensor;          // tensor name
  int64_t device = -1;         // -1: the reduction over a partial destination's summands
  std::vector<int64_t> index;  // global multi-index of the element
  std::string expected;        // decoded values ("1.5", "-3", "true", bits for patterns)
  std::string got;
};

struct OracleReport {
  int64_t tensors = 0;
  int64_t elements = 0;    // destination elements checked (all shards, replicas included)
  int64_t bytes = 0;       // destination bytes checked
  int64_t mismatches = 0;  // total number of wrong elements
  std::vector<OracleMismatch> first;  // the first `max_reported`, in tensor/entry/element order
  bool ok() const { return mismatches == 0; }
};

// Checks every destination element of every tensor. `buffers` as made by
// fill_sources (sizes are checked: kInvalidArgument naming the buffer).
OracleReport check_destinations(const Plan& plan, const OracleBuffers& buffers,
                                size_t max_reported = 10);

// Checks one destination shard of a tensor whose destination is not
// partial (kInvalidArgument otherwise: partial destinations need every
// summand, use check_destinations). Adds to `report`. With `only`, checks
// just the elements whose byte in it (one per element, buffer order) is
// nonzero (StageCoverage).
void check_destination_shard(const TensorSpec& tensor, uint32_t tensor_index, size_t entry,
                             std::span<const std::byte> data, OracleReport& report,
                             size_t max_reported = 10, const std::vector<uint8_t>* only = nullptr);

// check_destination_shard for tensors[tensor_index] of a plan's tensors,
// scale tensors included (block scales, reshard/block_scales.h: a scale
// tensor's elements are checked, bit for bit, against the reference scales
// of the tensor it scales; check_destination_shard alone cannot tell a
// scale tensor from any f32 tensor). A tensor with block scales holds
// cast(x / s) of its source values x (both functions check that).
void check_plan_destination_shard(std::span<const TensorSpec> tensors, uint32_t tensor_index,
                                  size_t entry, std::span<const std::byte> data,
                                  OracleReport& report, size_t max_reported = 10,
                                  const std::vector<uint8_t>* only = nullptr);

// Which destination elements stages 0..`stage` of a staged plan write: the
// regions of the pieces of those stages in the plan's parts (local pieces
// are stage 0). written[t][e] has one byte per element of entry e of tensor
// t, in buffer order, or is empty: tensors with partial destinations (no
// stage forwards into them) and entries no piece of the plan's parts writes.
// Pieces into a scratch write no destination element; a region of a
// destination entry that a scratch contributes to in a later stage is not
// finished, and not marked.
struct StageCoverage {
  uint32_t stage = 0;
  std::vector<std::vector<std::vector<uint8_t>>> written;
};
StageCoverage stage_coverage(const Plan& plan, uint32_t stage);

// After an execution stopped after stage `stage` (ExecuteOptions::
// last_stage): checks the elements stages 0..stage wrote, each of which
// must already hold its value (what a later stage forwards). Needs every
// process part (kInvalidArgument otherwise).
OracleReport check_destinations_through_stage(const Plan& plan, const OracleBuffers& buffers,
                                              uint32_t stage, size_t max_reported = 10);

// ------------------------------------------------------------ verify_plan

class Engine;           // reshard/engine.h
struct ExecuteOptions;  // reshard/engine.h

struct VerifyOptions {
  // Memory for the shards allocated, as fill_sources's `max_bytes`: 0 half
  // the memory available, N > 0 N bytes, -1 (kUnlimitedPlanBytes) none;
  // checked before allocating (kResourceExhausted).
  int64_t max_bytes = 0;
  size_t max_reported = 10;  // OracleReport::first
  // >= 0: executes stages 0..last_stage only (ExecuteOptions::last_stage)
  // and checks what they wrote (StageCoverage); -1: the whole plan.
  int32_t last_stage = -1;
};

// What `reshard verify`, reshard_executor_verify and the tests do: executes
// `plan` on `engine` with the oracle's source values and poisoned
// destinations, then checks every destination element.
//  - process == kAllProcesses (an engine over the local transport): every
//    shard is allocated here (fill_sources), the whole plan executed, every
//    destination checked (partial ones by reducing their summands).
//  - process == the engine's rank (a distributed engine; collective: every
//    rank calls it with the same plan): this process's shards only, checked
//    here; elements, bytes and mismatches are summed over the group through
//    the transport (OracleReport::first holds this process's mismatches). A
//    tensor with a partial destination (its value spread over processes) is
//    kUnsupported, on every rank before anything moves.
// Throws what Engine::execute throws, and kResourceExhausted above the
// memory limit.
OracleReport verify_plan(Engine& engine, const Plan& plan, int32_t process,
                         const ExecuteOptions& options, const VerifyOptions& verify = {});

}  // namespace reshard
