#include "exec/schedule/engine_schedule.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include "exec/schedule/exec_common.h"
#include "exec/schedule/interleave.h"
#include "exec/schedule/stage_deps.h"
#include "plan/scratch_layout.h"
#include "reshard/box_copy.h"
#include "reshard/error.h"

namespace reshard::engine_detail {
namespace {

int64_t align8(int64_t v) { return (v + 7) & ~int64_t{7}; }

class Builder {
 public:
  Builder(const Plan& plan, int32_t process, const ProcessPart* part, const TransportInfo& info,
          const ExecuteOptions& options)
      : plan_(plan),
        tensors_(plan.tensors()),
        topology_(plan.topology()),
        part_(part),
        process_(process),
        info_(info),
        options_(options) {}

  Schedule build();
  Schedule build_whole();

 private:
  int32_t process_of(int64_t device) const { return topology_.info(device).process; }
  size_t slot_of(int64_t device);
  bool reduces(uint32_t tensor) const { return tensors_[tensor].src.partial(); }
  int64_t elem(uint32_t tensor) const { return dtype_size(tensors_[tensor].dtype); }
  int32_t ordinal_of(int64_t device) const { return topology_.info(device).ordinal; }
  std::string where(const char* list, size_t i) const {
    return "plan: part " + std::to_string(process_) + " " + list + "[" + std::to_string(i) + "]: ";
  }
  std::span<const Piece> message_pieces(const Message& m, const std::vector<Piece>& pieces,
                                        const char* list, size_t i);
  // `src_scratch`: the Schedule::scratch index of the scratch a piece
  // between buffers of this process reads (kNoScratch: none).
  void add_contribution(const Piece& p, uint32_t stage, int64_t arrival, bool from_buffer,
                        size_t msg, int64_t msg_offset, int64_t dst_device, uint32_t src_scratch);
  void add_direct(const Piece& p, int64_t round, int64_t arrival, uint32_t stage,
                  int64_t dst_device, uint32_t src_scratch);
  // Scratch: the buffers of `part` (process `process`), and the
  // Schedule::scratch index of the one of the current part a piece names on
  // `device` (checked by validate_pieces to exist).
  void add_scratch(const ProcessPart& part, int32_t process);
  uint32_t scratch_of(const Piece& p, int64_t device) {
    return scratch_in(*part_, p.tensor, device, region_of(p));
  }
  // Layout::box of entry `entry` of a tensor's source (`src`) or
  // destination, derived once per build (Layout::box computes the bounds
  // on every call, and a piece names its boxes several times).
  const Box& box_of(uint32_t tensor, bool src, uint32_t entry) {
    // Derived before (its table sized to the layout: the index checked).
    const std::vector<std::vector<Box>>& all = boxes_[src ? 1 : 0];
    if (tensor < all.size() && entry < all[tensor].size() && all[tensor][entry].rank >= 0) {
      return all[tensor][entry];
    }
    return derive_box(tensor, src, entry);
  }
  const Box& derive_box(uint32_t tensor, bool src, uint32_t entry);
  // What a piece of a message of `stage` reads (its layout's box).
  const Box& from_box(const Piece& p, uint32_t stage) {
    return box_of(p.tensor, reads_source(p, stage), p.src_entry);
  }
  // Plan::region of a piece of the current part (of `part`), its boxes
  // from box_of.
  Box region_of(const Piece& p) { return region_in(*part_, p); }
  Box region_in(const ProcessPart& part, const Piece& p);
  // The same until the next call of it or overlap: no Box cleared whole
  // (intersect's) but the overlap's rank written, in overlap_.
  const Box& region_ref(const ProcessPart& part, const Piece& p);
  const Box& overlap(const Box& a, const Box& b) {
    overlap_.rank = a.rank;
    for (int d = 0; d < a.rank; ++d) {
      overlap_.lo[d] = std::max(a.lo[d], b.lo[d]);
      overlap_.hi[d] = std::max(overlap_.lo[d], std::min(a.hi[d], b.hi[d]));
    }
    return overlap_;
  }
  // A direct copy's descriptor (DirectCopy::desc).
  CopyDesc direct_desc(const DirectCopy& c);
  int64_t piece_bytes(const Piece& p) {
    return region_of(p).volume() * wire_size(tensors_[p.tensor]);
  }
  uint32_t scratch_in(const ProcessPart& holder, uint32_t tensor, int64_t device,
                      const Box& region) const;
  void note_scratch_write(uint32_t scratch, uint32_t stage);
  // A piece writing a copy-staging scratch on `device`, from receive `raw`
  // (per-process schedules: the scratch's readers wait for it).
  void note_staging_write(const Piece& p, int64_t device, uint64_t raw);
  void note_scratch_read(uint32_t scratch, uint32_t stage, const char* list, size_t i);
  void check_scratch_order() const;
  EngineMessage engine_message(const Message& m, size_t i, bool send, int32_t peer,
                               std::span<const Piece> pieces);
  // What a piece of a message of `stage` reads: the tensor's source layout,
  // or in a later stage its destination layout (relays).
  const Layout& from(const Piece& p, uint32_t stage) const {
    return reads_source(p, stage) ? tensors_[p.tensor].src : tensors_[p.tensor].dst;
  }
  void add_targets();
  void add_local(size_t i);
  void check_recv(const Message& m, size_t i, std::span<const Piece> pieces) const;
  void sort_direct();
  void interleave_round(size_t b, size_t e);
  void join_local_round();
  void copy_replicas_once();
  void group_reductions();
  void find_mirrored_sends();
  void add_send(const Message& m, size_t i);
  void add_recv(const Message& m, size_t i);
  void build_rounds();
  // Dependencies (overlapping stages): raw events of what a piece of a
  // message of `stage` reads or writes, resolved to Schedule events by
  // resolve_deps once the direct rounds are known.
  void read_deps(const Piece& p, uint32_t stage, std::vector<uint64_t>& out);
  void write_deps(const Piece& p, uint32_t stage, std::vector<uint64_t>& out);
  uint32_t resolve(uint64_t raw) const;
  // resolve, with kRawStaging expanded into the events of every writer of
  // a copy-staging scratch.
  void resolve_into(uint64_t raw, std::vector<uint32_t>& out) const;
  void resolve_deps();
  void ready_for_entry(std::span<const size_t> order);
  void order_contributions();

  const Plan& plan_;
  const std::vector<TensorSpec>& tensors_;
  const Topology& topology_;
  const ProcessPart* part_;  // the part being read (whole plans: each in turn)
  int32_t process_;          // its process
  const TransportInfo& info_;
  const ExecuteOptions& options_;
  Schedule s_;
  std::unordered_map<int64_t, size_t> slots_;
  size_t work_block(std::unordered_map<int64_t, size_t>& blocks, int64_t device, int64_t bytes,
                    int64_t* offset);
  std::unordered_map<uint64_t, size_t> acc_of_;          // (tensor << 32 | entry) -> accs index
  std::unordered_map<int64_t, size_t> acc_blocks_;       // device -> work index
  std::unordered_map<int64_t, size_t> deferred_blocks_;  // device -> work index
  uint64_t seq_ = 0;
  bool whole_ = false;  // every part of the plan (build_whole)
  std::unique_ptr<stage_deps::WriterIndex> writers_;
  std::vector<uint32_t> recv_msg_;               // part recvs index -> messages index
  std::vector<std::vector<uint64_t>> raw_deps_;  // per message
  std::vector<uint32_t> found_;                  // scratch
  std::unordered_map<const ProcessPart*, size_t> scratch_base_;  // part -> first Schedule::scratch
  std::unordered_map<int64_t, size_t> scratch_blocks_;           // device -> work index
  // Per Schedule::scratch: the highest stage writing it (-1: none), and the
  // reads (stage, where) to check against it.
  std::vector<int64_t> scratch_write_stage_;
  // Per Schedule::scratch of a per-process schedule: the lowest stage of a
  // message writing it (scratch_lives; 0 in a whole-plan schedule).
  std::vector<uint32_t> scratch_first_;
  struct ScratchRead {
    uint32_t scratch;
    uint32_t stage;
    std::string where;
  };
  std::vector<ScratchRead> scratch_reads_;
  // Per Schedule::scratch of a per-process schedule that is a copy-staging
  // scratch: its writers, as kRawRecv events (receives, and messages
  // between devices of this process), and whether local pieces write it
  // (direct round -1).
  std::vector<std::vector<uint64_t>> staging_writers_;
  std::vector<uint8_t> staging_local_;
  // Per-process schedules: round keys of contributions between buffers of
  // this process that read a scratch or a destination entry (stage > 0),
  // reduced once that round is (a round without messages is added).
  std::vector<int64_t> extra_keys_;
  Box overlap_;  // overlap, region_ref: dimensions past its rank unset
  // sort_direct: the new order (positions into s_.direct) and each
  // position's DirectCopy::interleave, which interleave_round rearranges.
  std::vector<uint32_t> order_;
  std::vector<uint32_t> interleave_;
  // box_of: per tensor, its source and destination entries' boxes (rank -1:
  // not derived yet).
  std::vector<std::vector<Box>> boxes_[2];
  // Per part send: it is between two devices of this process and equals a
  // receive of the part, pieces included (find_mirrored_sends), so that
  // what checking it would check is checked on the receive. Per send piece:
  // only such sends hold it (validate_pieces skips it).
  std::vector<uint8_t> mirrored_;
  std::vector<uint8_t> mirrored_pieces_;
  static constexpr uint64_t kRawMessage = uint64_t{0} << 62;
  static constexpr uint64_t kRawRecv = uint64_t{1} << 62;  // an index in part recvs
  static constexpr uint64_t kRawAcc = uint64_t{2} << 62;
  static constexpr uint64_t kRawStaging = uint64_t{3} << 62;  // a Schedule::scratch index
  static constexpr uint64_t kRawMask = (uint64_t{1} << 62) - 1;
  static constexpr uint32_t kNoMessage = 0xffffffffu;
};

// Reserves `bytes` (8-aligned) in the work block of `device` of one kind.
size_t Builder::work_block(std::unordered_map<int64_t, size_t>& blocks, int64_t device,
                           int64_t bytes, int64_t* offset) {
  auto [it, fresh] = blocks.emplace(device, s_.work.size());
  if (fresh) s_.work.push_back({device, topology_.info(device).ordinal, 0});
  WorkBlock& w = s_.work[it->second];
  *offset = w.bytes;
  w.bytes = align8(w.bytes + bytes);
  return it->second;
}

size_t Builder::slot_of(int64_t device) {
  auto [it, fresh] = slots_.emplace(device, s_.slots.size());
  if (fresh) s_.slots.push_back({device, topology_.info(device).ordinal, 0});
  return it->second;
}

const Box& Builder::derive_box(uint32_t tensor, bool src, uint32_t entry) {
  const Layout* layout = nullptr;
  if (tensor < tensors_.size()) layout = src ? &tensors_[tensor].src : &tensors_[tensor].dst;
  if (layout == nullptr || entry >= layout->num_entries()) {
    fail(ErrorCode::kInvalidArgument, "plan: part " + std::to_string(process_) +
                                          ": a piece names a tensor or entry out of range");
  }
  std::vector<std::vector<Box>>& all = boxes_[src ? 1 : 0];
  if (all.empty()) all.resize(tensors_.size());
  std::vector<Box>& boxes = all[tensor];
  if (boxes.empty()) {
    Box none;
    none.rank = -1;
    boxes.assign(layout->num_entries(), none);
  }
  Box& b = boxes[entry];
  if (b.rank < 0) b = layout->box(entry);
  return b;
}

Box Builder::region_in(const ProcessPart& part, const Piece& p) {
  if (p.region != kOverlapRegion) {
    if (p.region >= part.regions.size()) return plan_.region(part, p);  // throws
    return part.regions[p.region];
  }
  return intersect(box_of(p.tensor, true, p.src_entry), box_of(p.tensor, false, p.dst_entry));
}

const Box& Builder::region_ref(const ProcessPart& part, const Piece& p) {
  if (p.region != kOverlapRegion) {
    if (p.region >= part.regions.size()) {
      overlap_ = plan_.region(part, p);  // throws
      return overlap_;
    }
    overlap_ = part.regions[p.region];
    return overlap_;
  }
  return overlap(box_of(p.tensor, true, p.src_entry), box_of(p.tensor, false, p.dst_entry));
}

CopyDesc Builder::direct_desc(const DirectCopy& c) {
  const Piece& p = *c.piece;
  // A copy-staging scratch in place of an entry (its pieces name regions).
  const Box& src =
      c.src_scratch != kNoScratch ? s_.scratch[c.src_scratch].box : from_box(p, c.stage);
  const Box& dst = c.dst_scratch != kNoScratch ? s_.scratch[c.dst_scratch].box
                                               : box_of(p.tensor, false, p.dst_entry);
  // A piece naming no region (stage 0) moves the overlap of the two.
  if (p.region == kOverlapRegion) return make_copy_desc(overlap(src, dst), src, dst);
  return make_copy_desc(region_ref(*c.part, p), src, dst);
}

std::span<const Piece> Builder::message_pieces(const Message& m, const std::vector<Piece>& pieces,
                                               const char* list, size_t i) {
  if (m.first_piece > pieces.size() || m.num_pieces > pieces.size() - m.first_piece) {
    fail(ErrorCode::kInvalidArgument, where(list, i) + "pieces out of range");
  }
  const std::span<const Piece> span(pieces.data() + m.first_piece, m.num_pieces);
  int64_t bytes = 0;
  for (const Piece& p : span) bytes += piece_bytes(p);
  if (bytes != m.bytes) {
    fail(ErrorCode::kInvalidArgument, where(list, i) + std::to_string(m.bytes) +
                                          " bytes, its pieces hold " + std::to_string(bytes));
  }
  return span;
}

void Builder::add_contribution(const Piece& p, uint32_t stage, int64_t arrival, bool from_buffer,
                               size_t msg, int64_t msg_offset, int64_t dst_device,
                               uint32_t src_scratch) {
  const TensorSpec& t = tensors_[p.tensor];
  Contribution c;
  if (p.dst_entry == kScratchEntry) {
    const uint32_t k = scratch_of(p, dst_device);
    c.acc = s_.scratch[k].acc;
    note_scratch_write(k, stage);
  } else {
    const auto it = acc_of_.find(uint64_t{p.tensor} << 32 | p.dst_entry);
    if (it == acc_of_.end()) {
      fail(ErrorCode::kInternal, "engine: no accumulator for a reduced piece");
    }
    c.acc = it->second;
  }
  c.tensor = p.tensor;
  c.dst_entry = p.dst_entry;
  c.summand = reads_source(p, stage) ? t.src.summand(p.src_entry) : kScratchSummand;
  c.seq = seq_++;
  c.region = region_of(p);
  c.arrival = arrival;
  c.from_buffer = from_buffer;
  c.bytes = c.region.volume() * elem(p.tensor);
  if (from_buffer) {
    c.src_entry = p.src_entry;
    if (p.src_entry == kScratchEntry) {
      if (src_scratch == kNoScratch) fail(ErrorCode::kInternal, "engine: scratch read unresolved");
      c.src_scratch = src_scratch;
      c.src_box = s_.scratch[c.src_scratch].box;
    } else if (!reads_source(p, stage)) {
      c.src_dst = true;
      c.src_box = box_of(p.tensor, false, p.src_entry);
    } else {
      c.src_box = box_of(p.tensor, true, p.src_entry);
    }
  } else {
    c.msg = msg;
    c.msg_offset = msg_offset;
  }
  s_.contributions.push_back(c);
}

uint32_t Builder::scratch_in(const ProcessPart& holder, uint32_t tensor, int64_t device,
                             const Box& region) const {
  const auto base = scratch_base_.find(&holder);
  const int64_t k = find_scratch(holder, tensor, device, region);
  if (base == scratch_base_.end() || k < 0) {
    fail(ErrorCode::kInvalidArgument, "plan: part " + std::to_string(process_) +
                                          ": a piece names a scratch the part does not hold");
  }
  return static_cast<uint32_t>(base->second + static_cast<size_t>(k));
}

void Builder::note_scratch_write(uint32_t scratch, uint32_t stage) {
  scratch_write_stage_[scratch] = std::max<int64_t>(scratch_write_stage_[scratch], stage);
}

void Builder::note_scratch_read(uint32_t scratch, uint32_t stage, const char* list, size_t i) {
  scratch_reads_.push_back({scratch, stage, where(list, i)});
}

// A scratch is read once its reduction is finished: by pieces of a stage
// after every stage writing it (the reads of stage s wait for the
// reduction, whose contributions of stage >= s could wait for them).
void Builder::check_scratch_order() const {
  for (const ScratchRead& r : scratch_reads_) {
    const int64_t w = scratch_write_stage_[r.scratch];
    if (w >= static_cast<int64_t>(r.stage)) {
      const ScratchBuffer& b = s_.scratch[r.scratch];
      fail(ErrorCode::kInvalidArgument,
           r.where + "a piece of stage " + std::to_string(r.stage) + " reads the scratch " +
               to_string(b.box) + " of tensor " + std::to_string(b.tensor) + " on device " +
               std::to_string(b.device) + ", which a piece of stage " + std::to_string(w) +
               " writes (a scratch is read in a later stage than every write)");
    }
  }
}

// The scratch buffers of `part`: memory in work blocks of their devices
// (the dtype's bytes, and an f32 accumulator for f16/bf16/f8), and one
// reduction target each.
void Builder::add_scratch(const ProcessPart& part, int32_t process) {
  scratch_base_[&part] = s_.scratch.size();
  // A per-process schedule places its scratch by the stages that write and
  // read it (plan/scratch_layout.h, as PlanStats::max_scratch_bytes counts
  // it): buffers whose stages do not overlap share bytes. Every scratch
  // written in stage s > 0 is then filled with the identity, and its local
  // contributions reduced, no earlier than round 0 of stage s (Run::fill,
  // add_local), after every read of stage s - 1 or below completed. A
  // whole-plan schedule keeps each buffer apart (its reductions run as
  // tasks, not in stage order).
  std::vector<planning::ScratchLife> lives;
  planning::ScratchPlacement placed;
  std::map<int64_t, std::pair<size_t, int64_t>> base;  // device -> (work block, offset)
  if (!whole_) {
    lives = planning::scratch_lives(part, tensors_);
    placed = planning::place_scratch(lives);
    for (const auto& [device, bytes] : placed.peak) {
      int64_t offset = 0;
      const size_t block = work_block(scratch_blocks_, device, bytes, &offset);
      base[device] = {block, offset};
      s_.scratch_bytes += bytes;
    }
  }
  for (size_t k = 0; k < part.scratch.size(); ++k) {
    const Scratch& sc = part.scratch[k];
    const std::string at =
        "plan: part " + std::to_string(process) + " scratch[" + std::to_string(k) + "]: ";
    if (sc.tensor >= tensors_.size()) {
      fail(ErrorCode::kInvalidArgument, at + "tensor index out of range");
    }
    const TensorSpec& spec = tensors_[sc.tensor];
    // A scratch of a tensor whose source is not partial: copy staging.
    const bool staging = !spec.src.partial();
    if (staging && (has_cast(spec) || has_block_scales(spec))) {
      fail(ErrorCode::kInvalidArgument, at + "a staging scratch of tensor " +
                                            std::to_string(sc.tensor) +
                                            ", which has a cast or block scales");
    }
    if (sc.device < 0 || process_of(sc.device) != process) {
      fail(ErrorCode::kInvalidArgument,
           at + "device " + std::to_string(sc.device) + " is not on this process");
    }
    if (sc.box.rank != static_cast<int>(spec.shape.size()) || sc.box.empty()) {
      fail(ErrorCode::kInvalidArgument,
           at + "box " + to_string(sc.box) + " is empty or not of the tensor's rank");
    }
    for (int d = 0; d < sc.box.rank; ++d) {
      if (sc.box.lo[d] < 0 || sc.box.hi[d] > spec.shape[static_cast<size_t>(d)]) {
        fail(ErrorCode::kInvalidArgument,
             at + "box " + to_string(sc.box) + " is outside the tensor's shape");
      }
    }
    ScratchBuffer b;
    b.tensor = sc.tensor;
    b.device = sc.device;
    b.box = sc.box;
    if (whole_) {
      const int64_t bytes = sc.box.volume() * elem(sc.tensor);
      b.block = work_block(scratch_blocks_, sc.device, bytes, &b.offset);
      s_.scratch_bytes += bytes;
    } else {
      const auto& [block, offset] = base.at(sc.device);
      b.block = block;
      b.offset = offset + placed.offset[k];
    }
    scratch_write_stage_.push_back(-1);
    scratch_first_.push_back(whole_ ? 0 : lives[k].first);
    staging_writers_.emplace_back();
    staging_local_.push_back(0);
    if (staging) {
      // Copies only: no identity, no accumulator (plan.h, Scratch).
      b.acc = kNoAcc;
      s_.scratch.push_back(b);
      continue;
    }
    AccTarget a;
    a.tensor = sc.tensor;
    a.dst_entry = kScratchEntry;
    a.scratch = static_cast<uint32_t>(s_.scratch.size());
    a.box = sc.box;
    a.device = sc.device;
    a.elements = sc.box.volume();
    // A scratch holds sums (a mean divides at its destination only): a
    // separate accumulator for the dtypes that accumulate in f32.
    a.separate = !acc_is_elem(spec.dtype);
    a.store_writes = a.separate;
    if (a.separate) {
      const int64_t acc_bytes = a.elements * acc_size(spec.dtype);
      a.acc_block = work_block(acc_blocks_, sc.device, acc_bytes, &a.acc_offset);
      s_.accumulator_bytes += acc_bytes;
    }
    b.acc = s_.accs.size();
    s_.accs.push_back(a);
    s_.scratch.push_back(b);
  }
}

// A piece between two buffers of this process, from a message of `round`
// (a round_key; -1: a local piece). A reduced one contributes from its
// source buffer, which is there from the start, so after round `arrival`
// = -1: in a per-process schedule its reductions follow the rounds of the
// messages from other processes; in a whole-plan schedule every
// contribution reads a source buffer, so each destination entry is reduced
// in one pass over all its summands (no accumulator kept between rounds).
// A piece of a later stage copies what an earlier one
// wrote (for a partial source: the reduced value, reduce-scatter's gather).
// A contribution reading a scratch or a destination entry (stage > 0) is
// reduced in the round of its message (in a per-process schedule, a round
// of its own when no message has that key), after what it reads was
// stored: the scratch's writers are of earlier stages (checked).
void Builder::add_direct(const Piece& p, int64_t round, int64_t arrival, uint32_t stage,
                         int64_t dst_device, uint32_t src_scratch) {
  if (is_contribution(tensors_[p.tensor], p, stage)) {
    if (stage > 0) {
      // A scratch's summand of a later stage (reads_source) waits for its
      // stage too: the scratch is written then, not before.
      if (!whole_) extra_keys_.push_back(round);
      arrival = round;
    }
    add_contribution(p, stage, arrival, true, 0, 0, dst_device, src_scratch);
    s_.local_bytes += piece_bytes(p);
    return;
  }
  // The descriptor is derived once the copies are in order (sort_direct).
  const int64_t bytes = region_ref(*part_, p).volume() * elem(p.tensor);
  DirectCopy d{part_, &p, round, stage, bytes};
  // A copy-staging scratch read (stage > 0) or written (stage 0).
  d.src_scratch = src_scratch;
  if (p.dst_entry == kScratchEntry) {
    d.dst_scratch = scratch_of(p, dst_device);
    note_scratch_write(d.dst_scratch, stage);
  }
  s_.direct.push_back(d);
  s_.local_bytes += bytes;
}

// The engine's view of message `i` of the part's sends (`send`) or
// receives, exchanged with rank `peer` (checked to be in the group).
EngineMessage Builder::engine_message(const Message& m, size_t i, bool send, int32_t peer,
                                      std::span<const Piece> pieces) {
  if (peer < 0 || peer >= info_.size) {
    fail(ErrorCode::kInvalidArgument,
         where(send ? "sends" : "recvs", i) + (send ? "destination device " : "source device ") +
             std::to_string(send ? m.dst_device : m.src_device) + " is on process " +
             std::to_string(peer) + ", outside the transport's " + std::to_string(info_.size) +
             " ranks");
  }
  EngineMessage e;
  e.send = send;
  e.peer = peer;
  e.round = m.round;
  e.stage = m.stage;
  e.sub = m.sub;
  e.key = round_key(m.stage, m.round);
  e.src_device = m.src_device;
  e.dst_device = m.dst_device;
  e.local_device = send ? m.src_device : m.dst_device;
  e.slot = slot_of(e.local_device);
  e.ordinal = s_.slots[e.slot].ordinal;
  e.remote_ordinal = ordinal_of(send ? m.dst_device : m.src_device);
  e.bytes = m.bytes;
  e.pieces = pieces;
  return e;
}

// A message between two devices of this process is a direct copy, made
// from its receive (add_recv); its send holds the same pieces and is not
// read, and where it equals the receive field by field, pieces included,
// every check of it is one the receive passes (validate_pieces, sizes,
// devices). Such sends and the pieces only they hold are marked.
void Builder::find_mirrored_sends() {
  const std::vector<Message>& sends = part_->sends;
  const std::vector<Message>& recvs = part_->recvs;
  mirrored_.assign(sends.size(), 0);
  mirrored_pieces_.assign(part_->send_pieces.size(), 0);
  const auto in_range = [](const Message& m, size_t n) {
    return m.first_piece <= n && m.num_pieces <= n - m.first_piece;
  };
  const auto same_key = [](const Message& a, const Message& b) {
    return std::tie(a.src_device, a.dst_device, a.stage, a.round, a.sub) <
           std::tie(b.src_device, b.dst_device, b.stage, b.round, b.sub);
  };
  // The receives between devices of this process, by (devices, stage, round,
  // sub).
  std::vector<const Message*> own;
  for (const Message& m : recvs) {
    if (m.src_device == m.dst_device || !topology_.contains(m.src_device) ||
        !topology_.contains(m.dst_device) || process_of(m.src_device) != process_ ||
        process_of(m.dst_device) != process_ || !in_range(m, part_->recv_pieces.size())) {
      continue;
    }
    own.push_back(&m);
  }
  if (own.empty()) return;
  std::stable_sort(own.begin(), own.end(),
                   [&](const Message* a, const Message* b) { return same_key(*a, *b); });
  for (size_t i = 0; i < sends.size(); ++i) {
    const Message& m = sends[i];
    if (!in_range(m, part_->send_pieces.size())) continue;
    auto it = std::lower_bound(own.begin(), own.end(), &m, [&](const Message* a, const Message* b) {
      return same_key(*a, *b);
    });
    for (; it != own.end() && !same_key(m, **it); ++it) {
      const Message& r = **it;
      if (r.bytes != m.bytes || r.num_pieces != m.num_pieces) continue;
      if (std::equal(part_->send_pieces.begin() + static_cast<std::ptrdiff_t>(m.first_piece),
                     part_->send_pieces.begin() +
                         static_cast<std::ptrdiff_t>(m.first_piece + m.num_pieces),
                     part_->recv_pieces.begin() + static_cast<std::ptrdiff_t>(r.first_piece))) {
        mirrored_[i] = 1;
        break;
      }
    }
  }
  // A piece is skipped only when no other send holds it.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < sends.size(); ++i) {
      const Message& m = sends[i];
      if (mirrored_[i] != (pass == 0 ? 1 : 0) || !in_range(m, part_->send_pieces.size())) continue;
      std::fill_n(mirrored_pieces_.begin() + static_cast<std::ptrdiff_t>(m.first_piece),
                  m.num_pieces, static_cast<uint8_t>(pass == 0 ? 1 : 0));
    }
  }
}

void Builder::add_send(const Message& m, size_t i) {
  if (process_of(m.src_device) != process_) {
    fail(ErrorCode::kInvalidArgument, where("sends", i) + "source device " +
                                          std::to_string(m.src_device) + " is not on this process");
  }
  if (mirrored_[i]) return;  // checked as its receive, a direct copy
  const std::span<const Piece> pieces = message_pieces(m, part_->send_pieces, "sends", i);
  for (const Piece& p : pieces) {
    if (p.src_entry == kScratchEntry) continue;  // on the sender (validate_pieces)
    if (from(p, m.stage).device(p.src_entry) != m.src_device) {
      fail(ErrorCode::kInvalidArgument,
           where("sends", i) + "a piece reads an entry of another device than the sender");
    }
  }
  const int32_t peer = process_of(m.dst_device);
  if (peer == process_) return;  // between devices of this process: done from recvs
  EngineMessage e = engine_message(m, i, true, peer, pieces);
  // Pieces reading a scratch are packed from it (staged, never in place
  // or gathered: a scratch is not a caller's buffer).
  bool reads_scratch = false;
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (pieces[k].src_entry != kScratchEntry) continue;
    if (!reads_scratch) e.scratch_src.assign(pieces.size(), kNoScratch);
    reads_scratch = true;
    e.scratch_src[k] = scratch_of(pieces[k], m.src_device);
    note_scratch_read(e.scratch_src[k], m.stage, "sends", i);
  }
  // A cast is packed (converted into staging), never sent in place or gathered.
  const bool casts = std::any_of(pieces.begin(), pieces.end(),
                                 [&](const Piece& p) { return has_cast(tensors_[p.tensor]); });
  const bool gather = !reads_scratch && !casts && info_.gather &&
                      options_.packing != ExecuteOptions::Packing::kStaging &&
                      m.bytes <= kMaxGatherBytes;
  e.mode = EngineMessage::Mode::kStaged;
  if (pieces.size() == 1 && !reads_scratch && !casts) {
    const Piece& p = pieces[0];
    const Box region = region_of(p);
    const CopyDesc d = make_copy_desc(region, from_box(p, m.stage), region);
    if (copy_desc_contiguous(d)) {
      e.mode = EngineMessage::Mode::kInPlace;
      e.in_place = {p.tensor, p.src_entry, reads_source(p, m.stage)};
      e.in_place_offset = d.src_offset * elem(p.tensor);
    }
  }
  if (e.mode == EngineMessage::Mode::kStaged && gather) {
    e.mode = EngineMessage::Mode::kGather;
    for (const Piece& p : pieces) {
      e.segments.push_back(
          {nullptr, from(p, m.stage).box(p.src_entry), plan_.region(*part_, p), elem(p.tensor)});
    }
  }
  std::vector<uint64_t> raw;
  for (size_t k = 0; k < pieces.size(); ++k) {
    if (reads_scratch && e.scratch_src[k] != kNoScratch) {
      // The scratch's reduction, finished and stored; a copy-staging
      // scratch's writers.
      const ScratchBuffer& b = s_.scratch[e.scratch_src[k]];
      raw.push_back(b.staging() ? kRawStaging | e.scratch_src[k] : kRawAcc | b.acc);
    } else {
      read_deps(pieces[k], m.stage, raw);
    }
  }
  raw_deps_.push_back(std::move(raw));
  s_.messages.push_back(std::move(e));
}

void Builder::add_recv(const Message& m, size_t i) {
  if (process_of(m.dst_device) != process_) {
    fail(ErrorCode::kInvalidArgument, where("recvs", i) + "destination device " +
                                          std::to_string(m.dst_device) + " is not on this process");
  }
  const std::span<const Piece> pieces = message_pieces(m, part_->recv_pieces, "recvs", i);
  for (const Piece& p : pieces) {
    if (p.dst_entry == kScratchEntry) continue;  // on the receiver (validate_pieces)
    if (tensors_[p.tensor].dst.device(p.dst_entry) != m.dst_device) {
      fail(ErrorCode::kInvalidArgument,
           where("recvs", i) + "a piece writes an entry of another device than the receiver");
    }
  }
  const int32_t peer = process_of(m.src_device);
  if (peer == process_) {
    recv_msg_.push_back(kNoMessage);
    for (const Piece& p : pieces) {
      if (p.src_entry != kScratchEntry && from(p, m.stage).device(p.src_entry) != m.src_device) {
        fail(ErrorCode::kInvalidArgument,
             where("recvs", i) + "a piece reads an entry of another device than the sender");
      }
      uint32_t src_scratch = kNoScratch;
      if (p.src_entry == kScratchEntry) {
        src_scratch = scratch_of(p, m.src_device);
        note_scratch_read(src_scratch, m.stage, "recvs", i);
      }
      note_staging_write(p, m.dst_device, kRawRecv | i);
      add_direct(p, round_key(m.stage, m.round), -1, m.stage, m.dst_device, src_scratch);
    }
    return;
  }
  EngineMessage e = engine_message(m, i, false, peer, pieces);
  const size_t index = s_.messages.size();
  recv_msg_.push_back(static_cast<uint32_t>(index));
  std::vector<uint64_t> raw;
  for (const Piece& p : pieces) write_deps(p, m.stage, raw);
  raw_deps_.push_back(std::move(raw));
  int64_t offset = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    if (is_contribution(tensors_[p.tensor], p, m.stage)) {
      e.has_reduce = true;
      add_contribution(p, m.stage, e.key, false, index, offset, m.dst_device, kNoScratch);
    } else if (p.dst_entry == kScratchEntry) {
      // Into a copy-staging scratch: unpacked from staging (never in place
      // or gathered: a scratch is not a caller's buffer).
      if (e.scratch_dst.empty()) e.scratch_dst.assign(pieces.size(), kNoScratch);
      e.scratch_dst[k] = scratch_of(p, m.dst_device);
      note_scratch_write(e.scratch_dst[k], m.stage);
      note_staging_write(p, m.dst_device, kRawRecv | i);
    }
    offset += piece_bytes(p);
  }
  e.mode = EngineMessage::Mode::kStaged;
  // A cast is unpacked (converted from staging), never received in place.
  const bool casts = std::any_of(pieces.begin(), pieces.end(),
                                 [&](const Piece& p) { return has_cast(tensors_[p.tensor]); });
  if (!e.has_reduce && !casts && e.scratch_dst.empty()) {
    if (pieces.size() == 1) {
      const Piece& p = pieces[0];
      const Box region = region_of(p);
      const CopyDesc d = make_copy_desc(region, region, box_of(p.tensor, false, p.dst_entry));
      if (copy_desc_contiguous(d)) {
        e.mode = EngineMessage::Mode::kInPlace;
        e.in_place = {p.tensor, p.dst_entry, false};
        e.in_place_offset = d.dst_offset * elem(p.tensor);
      }
    }
    const bool gather = info_.gather && options_.packing != ExecuteOptions::Packing::kStaging &&
                        m.bytes <= kMaxGatherBytes;
    if (e.mode == EngineMessage::Mode::kStaged && gather) {
      e.mode = EngineMessage::Mode::kGather;
      for (const Piece& p : pieces) {
        e.segments.push_back({nullptr, tensors_[p.tensor].dst.box(p.dst_entry),
                              plan_.region(*part_, p), elem(p.tensor)});
      }
    }
  }
  s_.messages.push_back(std::move(e));
}

void Builder::build_rounds() {
  const int32_t rank = process_;
  const int32_t size = info_.size;
  // Sort key: (stage, round, step, receive before send, source device,
  // destination device, sub): both ends of a pair of ranks post the
  // sub-messages of one round and devices in the same order.
  struct Key {
    int64_t round;  // round_key
    int32_t step;
    int32_t send;
    int64_t src;
    int64_t dst;
    uint32_t sub;
    size_t index;
  };
  std::vector<Key> keys;
  keys.reserve(s_.messages.size());
  for (size_t i = 0; i < s_.messages.size(); ++i) {
    const EngineMessage& m = s_.messages[i];
    const int32_t step = m.send ? (m.peer - rank + size) % size : (rank - m.peer + size) % size;
    keys.push_back({m.key, step, m.send ? 1 : 0, m.src_device, m.dst_device, m.sub, i});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    return std::tie(a.round, a.step, a.send, a.src, a.dst, a.sub) <
           std::tie(b.round, b.step, b.send, b.src, b.dst, b.sub);
  });
  const size_t nslots = s_.slots.size();
  for (size_t k = 0; k < keys.size(); ++k) {
    const Key& key = keys[k];
    if (s_.rounds.empty() || s_.rounds.back().key != key.round) {
      const EngineMessage& first = s_.messages[key.index];
      RoundPlan r;
      r.stage = first.stage;
      r.round = first.round;
      r.key = key.round;
      r.staged.assign(nslots, 0);
      s_.rounds.push_back(std::move(r));
    }
    RoundPlan& r = s_.rounds.back();
    if (k == 0 || keys[k - 1].round != key.round || keys[k - 1].step != key.step) {
      r.steps.emplace_back();
    }
    r.steps.back().push_back(key.index);
    EngineMessage& m = s_.messages[key.index];
    if (m.mode == EngineMessage::Mode::kStaged) {
      m.offset = r.staged[m.slot];  // relative for now
      r.staged[m.slot] += m.bytes;
    }
  }
  // Rounds without messages in which contributions between buffers of
  // this process are reduced (add_direct).
  if (!extra_keys_.empty()) {
    std::sort(extra_keys_.begin(), extra_keys_.end());
    extra_keys_.erase(std::unique(extra_keys_.begin(), extra_keys_.end()), extra_keys_.end());
    bool added = false;
    for (int64_t key : extra_keys_) {
      const bool present = std::any_of(s_.rounds.begin(), s_.rounds.end(),
                                       [&](const RoundPlan& r) { return r.key == key; });
      if (present) continue;
      RoundPlan r;
      r.stage = static_cast<uint32_t>(static_cast<uint64_t>(key) >> 32);
      r.round = static_cast<uint32_t>(key & 0xffffffff);
      r.key = key;
      r.staged.assign(nslots, 0);
      s_.rounds.push_back(std::move(r));
      added = true;
    }
    if (added) {
      std::stable_sort(s_.rounds.begin(), s_.rounds.end(),
                       [](const RoundPlan& a, const RoundPlan& b) { return a.key < b.key; });
    }
  }
  // Arena capacity per device: the largest round, or two consecutive rounds
  // when they fit the budget together.
  const int64_t budget = plan_.options().staging_budget_bytes > 0
                             ? plan_.options().staging_budget_bytes
                             : std::numeric_limits<int64_t>::max();
  for (size_t slot = 0; slot < nslots; ++slot) {
    int64_t cap = 0;
    for (size_t i = 0; i < s_.rounds.size(); ++i) {
      const int64_t a = s_.rounds[i].staged[slot];
      cap = std::max(cap, a);
      if (options_.overlap && i + 1 < s_.rounds.size()) {
        const int64_t b = s_.rounds[i + 1].staged[slot];
        if (a <= budget - b) cap = std::max(cap, a + b);
      }
    }
    s_.slots[slot].capacity = cap;
  }
  // Absolute offsets: even rounds upwards from 0, odd rounds downwards from
  // the end of the arena.
  for (size_t i = 0; i < s_.rounds.size(); ++i) {
    for (const auto& step : s_.rounds[i].steps) {
      for (size_t mi : step) {
        EngineMessage& m = s_.messages[mi];
        if (m.mode != EngineMessage::Mode::kStaged || i % 2 == 0) continue;
        m.offset = s_.slots[m.slot].capacity - m.offset - m.bytes;
      }
    }
  }
  for (size_t i = 0; i < s_.rounds.size(); ++i) {
    for (const auto& step : s_.rounds[i].steps) {
      for (size_t mi : step) s_.messages[mi].round_index = i;
    }
  }
  // Staging conflicts: a staged message of round i + 1 reuses the staging
  // of round i - 1 (same end of the arena) and may overlap messages of
  // round i; the engine posts it once those are released.
  for (size_t i = 1; i < s_.rounds.size(); ++i) {
    for (const auto& step : s_.rounds[i].steps) {
      for (size_t mi : step) {
        EngineMessage& m = s_.messages[mi];
        m.conflict_begin = m.conflict_end = static_cast<uint32_t>(s_.conflicts.size());
        if (m.mode != EngineMessage::Mode::kStaged || m.bytes == 0) continue;
        for (const auto& prev_step : s_.rounds[i - 1].steps) {
          for (size_t pi : prev_step) {
            const EngineMessage& p = s_.messages[pi];
            if (p.mode != EngineMessage::Mode::kStaged || p.bytes == 0 || p.slot != m.slot) {
              continue;
            }
            if (p.offset < m.offset + m.bytes && m.offset < p.offset + p.bytes) {
              s_.conflicts.push_back(static_cast<uint32_t>(pi));
            }
          }
        }
        m.conflict_end = static_cast<uint32_t>(s_.conflicts.size());
      }
    }
  }
}

// The ready rounds of one destination entry's contributions, `order` in
// reduction order. The overlap queries go through an index on one
// dimension (the one in which the regions are thinnest: round cutting
// makes row slices), so that an entry receiving thousands of pieces over
// hundreds of rounds is not scanned quadratically.
void Builder::ready_for_entry(std::span<const size_t> order) {
  std::vector<Contribution>& cs = s_.contributions;
  const Box dst = s_.accs[cs[order[0]].acc].box;
  // The indexed dimension: smallest mean extent fraction.
  int dim = -1;
  double best_fraction = 2;
  for (int k = 0; k < dst.rank; ++k) {
    if (dst.extent(k) <= 1) continue;
    double sum = 0;
    for (size_t idx : order) sum += static_cast<double>(cs[idx].region.extent(k));
    const double fraction =
        sum / (static_cast<double>(order.size()) * static_cast<double>(dst.extent(k)));
    if (fraction < best_fraction) {
      best_fraction = fraction;
      dim = k;
    }
  }
  struct Span {
    int64_t lo;
    int64_t hi;
    size_t idx;
  };
  std::vector<Span> lower;  // contributions of lower summands, sorted by lo
  int64_t max_len = 0;
  int64_t lower_max = -1;  // max ready over lower summands
  std::vector<Span> group_spans;
  size_t group = 0;
  while (group < order.size()) {
    size_t group_end = group;
    const int32_t summand = cs[order[group]].summand;
    while (group_end < order.size() && cs[order[group_end]].summand == summand) ++group_end;
    int64_t group_max = -1;
    group_spans.clear();
    for (size_t k = group; k < group_end; ++k) {
      Contribution& c = cs[order[k]];
      c.ready = c.arrival;
      const bool empty = c.region.empty();
      if (!empty && c.arrival < lower_max) {
        const auto consider = [&](const Span& o) {
          const Contribution& x = cs[o.idx];
          if (x.ready > c.ready && !intersect(x.region, c.region).empty()) c.ready = x.ready;
        };
        if (dim < 0) {
          for (const Span& o : lower) consider(o);
        } else {
          const int64_t a = c.region.lo[dim];
          const int64_t b = c.region.hi[dim];
          // Spans overlapping [a, b) start in [a - max_len + 1, b).
          auto it = std::lower_bound(lower.begin(), lower.end(), a - max_len + 1,
                                     [](const Span& o, int64_t v) { return o.lo < v; });
          for (; it != lower.end() && it->lo < b; ++it) {
            if (it->hi > a) consider(*it);
          }
        }
      }
      group_max = std::max(group_max, c.ready);
      if (!empty) {
        group_spans.push_back(dim < 0 ? Span{0, 1, order[k]}
                                      : Span{c.region.lo[dim], c.region.hi[dim], order[k]});
      }
    }
    lower_max = std::max(lower_max, group_max);
    for (const Span& sp : group_spans) max_len = std::max(max_len, sp.hi - sp.lo);
    std::sort(group_spans.begin(), group_spans.end(),
              [](const Span& x, const Span& y) { return x.lo < y.lo; });
    const size_t mid = lower.size();
    lower.insert(lower.end(), group_spans.begin(), group_spans.end());
    std::inplace_merge(lower.begin(), lower.begin() + static_cast<std::ptrdiff_t>(mid), lower.end(),
                       [](const Span& x, const Span& y) { return x.lo < y.lo; });
    group = group_end;
  }
}

void Builder::order_contributions() {
  std::vector<Contribution>& cs = s_.contributions;
  // Per destination entry, in reduction order.
  std::vector<size_t> order(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Contribution& x = cs[a];
    const Contribution& y = cs[b];
    if (x.acc != y.acc) return x.acc < y.acc;
    if (x.summand != y.summand) return exec_detail::reduce_before(x.summand, y.summand);
    return x.seq < y.seq;
  });
  // ready(c) = max(arrival(c), ready of every lower-summand contribution to
  // the same entry whose region overlaps c's): then each element receives
  // its summands in order, within a round by the sort below.
  size_t i = 0;
  while (i < order.size()) {
    size_t end = i;
    const Contribution& first = cs[order[i]];
    while (end < order.size() && cs[order[end]].acc == first.acc) ++end;
    ready_for_entry(std::span<const size_t>(order.data() + i, end - i));
    i = end;
  }
  for (Contribution& c : cs) {
    if (!c.from_buffer && c.ready > c.arrival) {
      const int64_t device = s_.accs[c.acc].device;
      c.deferred_block = work_block(deferred_blocks_, device, c.bytes, &c.deferred_offset);
      s_.deferred_bytes += c.bytes;
    }
  }
  // Accumulator indices ascend with (tensor, destination entry), then the
  // scratch buffers.
  std::sort(cs.begin(), cs.end(), [](const Contribution& x, const Contribution& y) {
    if (x.ready != y.ready) return x.ready < y.ready;
    if (x.acc != y.acc) return x.acc < y.acc;
    if (x.summand != y.summand) return exec_detail::reduce_before(x.summand, y.summand);
    return x.seq < y.seq;
  });
}

// Accumulators and identity fills of this process's destination entries
// (whole plans: of every destination entry). In a whole-plan schedule a
// separate accumulator gets its memory later, only where it must outlive
// one task (group_reductions).
void Builder::add_targets() {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const TensorSpec& spec = tensors_[t];
    if (!spec.src.partial() && !spec.dst.partial()) continue;
    for (size_t e = 0; e < spec.dst.num_entries(); ++e) {
      if (!whole_ && process_of(spec.dst.device(e)) != process_) continue;
      if (spec.src.partial()) {
        AccTarget a;
        a.tensor = static_cast<uint32_t>(t);
        a.dst_entry = static_cast<uint32_t>(e);
        a.box = spec.dst.box(e);
        a.device = spec.dst.device(e);
        a.elements = a.box.volume();
        a.separate = !whole_ && !acc_is_elem(spec.dtype);
        a.store_writes = a.separate || exec_detail::mean_divisor(spec) > 1;
        if (a.separate) {
          const int64_t bytes = a.elements * acc_size(spec.dtype);
          a.acc_block = work_block(acc_blocks_, spec.dst.device(e), bytes, &a.acc_offset);
          s_.accumulator_bytes += bytes;
        }
        acc_of_.emplace(uint64_t{a.tensor} << 32 | a.dst_entry, s_.accs.size());
        s_.accs.push_back(a);
      } else {
        s_.fills.emplace_back(static_cast<uint32_t>(t), static_cast<uint32_t>(e));
      }
    }
  }
}

void Builder::add_local(size_t i) {
  const Piece& p = part_->local[i];
  const int64_t device = tensors_[p.tensor].src.device(p.src_entry);
  if ((p.dst_entry != kScratchEntry && device != tensors_[p.tensor].dst.device(p.dst_entry)) ||
      process_of(device) != process_) {
    fail(ErrorCode::kInvalidArgument,
         where("local", i) + "source and destination are not one device of this process");
  }
  // Into a scratch first written in a later stage: with that stage's
  // writes, once its bytes are free (add_scratch).
  if (p.dst_entry == kScratchEntry && !whole_) {
    const uint32_t first = scratch_first_[scratch_of(p, device)];
    if (first > 0) {
      const int64_t key = round_key(first, 0);
      extra_keys_.push_back(key);
      add_direct(p, -1, key, 0, device, kNoScratch);
      return;
    }
  }
  if (p.dst_entry == kScratchEntry && !whole_ && !tensors_[p.tensor].src.partial()) {
    staging_local_[scratch_of(p, device)] = 1;
  }
  add_direct(p, -1, -1, 0, device, kNoScratch);
}

// Direct copies in round order (stable: within a round, in the order they
// were found, but for interleaved groups), and the range of each round.
void Builder::sort_direct() {
  if (whole_) join_local_round();
  // The new order as positions into s_.direct: the copies move once, at
  // the end.
  const size_t n = s_.direct.size();
  order_.resize(n);
  for (size_t i = 0; i < n; ++i) order_[i] = static_cast<uint32_t>(i);
  const auto by_round = [this](uint32_t a, uint32_t b) {
    return s_.direct[a].round < s_.direct[b].round;
  };
  if (!std::is_sorted(order_.begin(), order_.end(), by_round)) {
    std::stable_sort(order_.begin(), order_.end(), by_round);
  }
  interleave_.assign(n, 0);
  for (size_t b = 0; b < n;) {
    size_t e = b;
    while (e < n && s_.direct[order_[e]].round == s_.direct[order_[b]].round) ++e;
    interleave_round(b, e);
    b = e;
  }
  // Permuted in place, cycle by cycle (position i takes the copy at
  // order_[i]): each copy moves once, into memory already there.
  for (size_t i = 0; i < n; ++i) {
    if (order_[i] == i) continue;
    DirectCopy held = s_.direct[i];
    size_t at = i;
    while (order_[at] != i) {
      const size_t from = order_[at];
      s_.direct[at] = s_.direct[from];
      order_[at] = static_cast<uint32_t>(at);
      at = from;
    }
    s_.direct[at] = held;
    order_[at] = static_cast<uint32_t>(at);
  }
  for (size_t i = 0; i < n; ++i) {
    DirectCopy& c = s_.direct[i];
    c.interleave = interleave_[i];
    if (s_.direct_rounds.empty() || s_.direct_rounds.back().round != c.round) {
      s_.direct_rounds.push_back({c.round, i, i});
    }
    s_.direct_rounds.back().end = i + 1;
  }
  // The descriptors, in the copies' order (reserved: the pointers stay).
  s_.direct_descs.reserve(n);
  for (const DirectCopy& c : s_.direct) s_.direct_descs.push_back(direct_desc(c));
  for (size_t i = 0; i < n; ++i) s_.direct[i].desc = &s_.direct_descs[i];
}

// Whole-plan schedules: the local pieces (round -1) run in the first round
// of stage 0's messages, where there is one. Every stage-0 copy reads a
// source buffer and writes its own region of a destination, so the round
// does not change what is written (relays, of later stages, come after
// every stage-0 round either way, and whole-plan rounds are not counted
// for round -1); in one round, a source's local slice joins the
// interleaved group of the other slices of its rows (interleave_round), so
// that the group reads its rows without a hole, in which the hardware
// prefetchers stop.
void Builder::join_local_round() {
  int64_t first = INT64_MAX;
  for (const DirectCopy& d : s_.direct) {
    if (d.stage == 0 && d.round >= 0) first = std::min(first, d.round);
  }
  if (first == INT64_MAX) return;
  for (DirectCopy& d : s_.direct) {
    if (d.round < 0) d.round = first;
  }
}

void Builder::interleave_round(size_t b, size_t e) {
  engine_detail::interleave_round(
      s_.direct, tensors_, [this](const DirectCopy& c) { return direct_desc(c); }, order_,
      interleave_, b, e);
}

// Whole-plan schedules: destination entries of one tensor with the same
// box hold the same values when the destination is not partial. The first
// of them (lowest entry) keeps its pieces or contributions; the others
// drop theirs and become contiguous copies of it after the last round.
// Tensors with pieces of a later stage are left alone: a relay reads a
// destination entry, which must then be written in its own stage.
void Builder::copy_replicas_once() {
  std::vector<char> staged(tensors_.size(), 0);
  for (const DirectCopy& d : s_.direct) {
    if (d.stage > 0) staged[d.piece->tensor] = 1;
  }
  // Per tensor, per destination entry: the entry it copies, or itself.
  std::vector<std::vector<uint32_t>> from(tensors_.size());
  bool any = false;
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const Layout& dst = tensors_[t].dst;
    const size_t n = dst.num_entries();
    if (dst.partial() || staged[t] || n < 2) continue;
    std::vector<uint32_t> order(n);
    for (uint32_t e = 0; e < n; ++e) order[e] = e;
    const auto key = [&](uint32_t e) {
      const Box& b = dst.box(e);
      return std::make_pair(std::vector<int64_t>(b.lo.begin(), b.lo.begin() + b.rank),
                            std::vector<int64_t>(b.hi.begin(), b.hi.begin() + b.rank));
    };
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> keys(n);
    for (uint32_t e = 0; e < n; ++e) keys[e] = key(e);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
    std::vector<uint32_t>& f = from[t];
    f.resize(n);
    for (uint32_t e = 0; e < n; ++e) f[e] = e;
    for (size_t i = 1; i < n; ++i) {
      const uint32_t e = order[i];
      const uint32_t prev = order[i - 1];
      if (keys[e] != keys[prev] || dst.box(e).volume() == 0) continue;
      f[e] = f[prev];  // order is stable: the first of equal boxes is the lowest entry
      s_.replicas.push_back({static_cast<uint32_t>(t), f[e], e,
                             dst.box(e).volume() * dtype_size(out_dtype(tensors_[t]))});
      any = true;
    }
  }
  if (!any) return;
  const auto is_replica = [&](uint32_t t, uint32_t e) {
    return e != kScratchEntry && !from[t].empty() && from[t][e] != e;
  };
  std::erase_if(s_.direct, [&](const DirectCopy& d) {
    return is_replica(d.piece->tensor, d.piece->dst_entry);
  });
  std::erase_if(s_.contributions,
                [&](const Contribution& c) { return is_replica(c.tensor, c.dst_entry); });
  for (AccTarget& a : s_.accs) a.replica = is_replica(a.tensor, a.dst_entry);
  std::sort(s_.replicas.begin(), s_.replicas.end(), [](const ReplicaCopy& a, const ReplicaCopy& b) {
    return std::tie(a.tensor, a.to) < std::tie(b.tensor, b.to);
  });
}

// Whole-plan schedules: one task per destination entry and round of its
// contributions (already sorted by round, entry, reduction order). An
// entry reduced in one round accumulates in its destination (f32, f64,
// integers) or in the running thread's scratch, as the host executor
// always did; one whose contributions span rounds keeps a separate
// accumulator in Schedule::work between them. Entries without
// contributions still get the identity.
void Builder::group_reductions() {
  const std::vector<Contribution>& cs = s_.contributions;
  std::vector<int64_t> first_round(s_.accs.size(), INT64_MAX);
  std::vector<int64_t> last_round(s_.accs.size(), INT64_MIN);
  for (const Contribution& c : cs) {
    first_round[c.acc] = std::min(first_round[c.acc], c.ready);
    last_round[c.acc] = std::max(last_round[c.acc], c.ready);
  }
  for (size_t a = 0; a < s_.accs.size(); ++a) {
    AccTarget& acc = s_.accs[a];
    const DType dtype = tensors_[acc.tensor].dtype;
    if (first_round[a] < last_round[a] && !acc_is_elem(dtype) && !acc.separate) {
      const int64_t bytes = acc.elements * acc_size(dtype);
      const int64_t device = acc.device;
      acc.separate = true;
      acc.acc_block = work_block(acc_blocks_, device, bytes, &acc.acc_offset);
      s_.accumulator_bytes += bytes;
    }
  }
  std::vector<ReduceGroup> groups;
  for (size_t a = 0; a < s_.accs.size(); ++a) {
    if (first_round[a] != INT64_MAX || s_.accs[a].elements == 0 || s_.accs[a].replica) continue;
    ReduceGroup g;  // no contribution: the identity alone
    g.acc = a;
    g.fill = g.store = true;
    g.scratch = !acc_is_elem(tensors_[s_.accs[a].tensor].dtype);
    groups.push_back(g);
  }
  for (size_t i = 0; i < cs.size();) {
    size_t end = i;
    while (end < cs.size() && cs[end].acc == cs[i].acc && cs[end].ready == cs[i].ready) ++end;
    const size_t a = cs[i].acc;
    ReduceGroup g;
    g.acc = a;
    g.round = cs[i].ready;
    g.begin = i;
    g.end = end;
    g.fill = g.round == first_round[a];
    g.store = g.round == last_round[a];
    g.scratch = !acc_is_elem(tensors_[s_.accs[a].tensor].dtype) && !s_.accs[a].separate;
    for (size_t k = i; k < end; ++k) g.bytes += cs[k].bytes;
    groups.push_back(g);
    i = end;
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const ReduceGroup& x, const ReduceGroup& y) { return x.round < y.round; });
  s_.groups = std::move(groups);
  // A whole-plan execution orders its work by (stage, round) alone, a
  // round's reductions and copies in parallel: a copy reading or writing a
  // destination entry whose reduction ends in its round or a later one (a
  // scratch contributing then) would see or be overwritten by an
  // unfinished value. (The distributed engine refuses the same plans,
  // resolve_deps.)
  for (const DirectCopy& d : s_.direct) {
    if (d.stage == 0 || !reduces(d.piece->tensor)) continue;
    for (const uint32_t entry : {d.piece->src_entry, d.piece->dst_entry}) {
      const auto it = acc_of_.find(uint64_t{d.piece->tensor} << 32 | entry);
      if (it == acc_of_.end() || last_round[it->second] < d.round) continue;
      fail(ErrorCode::kUnsupported,
           "plan: a piece of stage " + std::to_string(d.stage) + " of tensor " +
               std::to_string(d.piece->tensor) + " copies from or into destination entry " +
               std::to_string(entry) +
               " before its reduction ends (in-process execution needs "
               "reductions to end in an earlier stage than the copies of their entries)");
    }
  }
}

// What piece `p` of a message of `stage` > 0 reads: destination entry
// p.src_entry, written by receives and direct copies of earlier stages, or,
// for a partial source, by the reduction (finished when stored).
void Builder::read_deps(const Piece& p, uint32_t stage, std::vector<uint64_t>& out) {
  if (reads_source(p, stage)) return;        // a source buffer: there from the start
  if (p.src_entry == kScratchEntry) return;  // add_send: the scratch's reduction
  if (reduces(p.tensor)) {
    const auto it = acc_of_.find(uint64_t{p.tensor} << 32 | p.src_entry);
    if (it != acc_of_.end()) out.push_back(kRawAcc | it->second);
  }
  found_.clear();
  writers_->writers(p.tensor, p.src_entry, plan_.region(*part_, p), stage, found_);
  for (uint32_t r : found_) out.push_back(kRawRecv | r);
}

// A piece of a later stage writing into an entry whose reduction is stored
// over the whole entry waits for that store.
void Builder::write_deps(const Piece& p, uint32_t stage, std::vector<uint64_t>& out) {
  if (stage == 0 || !reduces(p.tensor) || is_contribution(tensors_[p.tensor], p, stage)) return;
  const auto it = acc_of_.find(uint64_t{p.tensor} << 32 | p.dst_entry);
  if (it != acc_of_.end() && s_.accs[it->second].store_writes) out.push_back(kRawAcc | it->second);
}

void Builder::note_staging_write(const Piece& p, int64_t device, uint64_t raw) {
  if (whole_ || p.dst_entry != kScratchEntry || tensors_[p.tensor].src.partial()) return;
  staging_writers_[scratch_of(p, device)].push_back(raw);
}

void Builder::resolve_into(uint64_t raw, std::vector<uint32_t>& out) const {
  if ((raw & ~kRawMask) != kRawStaging) {
    out.push_back(resolve(raw));
    return;
  }
  const size_t k = raw & kRawMask;
  for (uint64_t w : staging_writers_[k]) out.push_back(resolve(w));
  if (staging_local_[k] && !s_.direct_rounds.empty() && s_.direct_rounds.front().round == -1) {
    out.push_back(static_cast<uint32_t>(s_.direct_event(0)));
  }
}

uint32_t Builder::resolve(uint64_t raw) const {
  const uint64_t id = raw & kRawMask;
  switch (raw & ~kRawMask) {
    case kRawMessage:
      return static_cast<uint32_t>(id);
    case kRawAcc:
      return static_cast<uint32_t>(s_.acc_event(id));
    default: {
      if (recv_msg_[id] != kNoMessage) return recv_msg_[id];
      // A message between two devices of this process: its direct round.
      const Message& m = part_->recvs[id];
      const int64_t key = round_key(m.stage, m.round);
      const auto it = std::lower_bound(s_.direct_rounds.begin(), s_.direct_rounds.end(), key,
                                       [](const DirectRound& r, int64_t k) { return r.round < k; });
      if (it == s_.direct_rounds.end() || it->round != key) {
        fail(ErrorCode::kInternal, "engine: a relay reads a copy the schedule lacks");
      }
      return static_cast<uint32_t>(
          s_.direct_event(static_cast<size_t>(it - s_.direct_rounds.begin())));
    }
  }
}

// Events of every step and direct round, channels, and the order the
// engine tries the steps in.
void Builder::resolve_deps() {
  std::vector<uint64_t> raw;
  std::vector<uint32_t> events;
  for (DirectRound& r : s_.direct_rounds) {
    raw.clear();
    for (size_t i = r.begin; i < r.end; ++i) {
      const DirectCopy& d = s_.direct[i];
      read_deps(*d.piece, d.stage, raw);
      write_deps(*d.piece, d.stage, raw);
      if (d.src_scratch != kNoScratch && s_.scratch[d.src_scratch].staging()) {
        raw.push_back(kRawStaging | d.src_scratch);
      }
    }
    events.clear();
    for (uint64_t x : raw) resolve_into(x, events);
    stage_deps::sort_unique(events);
    r.dep_begin = static_cast<uint32_t>(s_.deps.size());
    s_.deps.insert(s_.deps.end(), events.begin(), events.end());
    r.dep_end = static_cast<uint32_t>(s_.deps.size());
  }
  for (size_t a = 0; a < s_.accs.size(); ++a) s_.accs[a].last_ready = INT64_MIN;
  for (const Contribution& c : s_.contributions) {
    s_.accs[c.acc].last_ready = std::max(s_.accs[c.acc].last_ready, c.ready);
  }
  s_.channel_steps.assign(2 * static_cast<size_t>(info_.size), {});
  std::vector<uint32_t> chans;
  for (size_t ri = 0; ri < s_.rounds.size(); ++ri) {
    const RoundPlan& r = s_.rounds[ri];
    for (size_t k = 0; k < r.steps.size(); ++k) {
      StepPlan st;
      st.round = ri;
      st.step = k;
      st.stage = r.stage;
      events.clear();
      chans.clear();
      for (size_t mi : r.steps[k]) {
        for (uint64_t x : raw_deps_[mi]) resolve_into(x, events);
        const EngineMessage& m = s_.messages[mi];
        chans.push_back(static_cast<uint32_t>(2 * m.peer + (m.send ? 1 : 0)));
      }
      stage_deps::sort_unique(events);
      stage_deps::sort_unique(chans);
      // A step waiting for a reduction that ends in its own round or later
      // would wait forever (a round is reduced once its steps completed):
      // a relay forwarding from a reducer in the stage of its scratch
      // contributions.
      for (uint32_t ev : events) {
        if (ev < s_.acc_event(0) || ev >= s_.events()) continue;
        const AccTarget& a = s_.accs[ev - s_.acc_event(0)];
        if (a.last_ready < r.key) continue;
        fail(ErrorCode::kInvalidArgument,
             "plan: part " + std::to_string(process_) + ": a message of stage " +
                 std::to_string(r.stage) + " round " + std::to_string(r.round) +
                 " forwards from a " +
                 (a.scratch == kNoScratch ? "destination entry" : std::string("scratch")) +
                 " of tensor " + std::to_string(a.tensor) +
                 " whose reduction ends in that round or later");
      }
      st.dep_begin = static_cast<uint32_t>(s_.deps.size());
      s_.deps.insert(s_.deps.end(), events.begin(), events.end());
      st.dep_end = static_cast<uint32_t>(s_.deps.size());
      st.chan_begin = static_cast<uint32_t>(s_.step_channels.size());
      s_.step_channels.insert(s_.step_channels.end(), chans.begin(), chans.end());
      st.chan_end = static_cast<uint32_t>(s_.step_channels.size());
      const auto id = static_cast<uint32_t>(s_.steps.size());
      for (uint32_t c : chans) s_.channel_steps[c].push_back(id);
      s_.steps.push_back(st);
    }
  }
  s_.priority.resize(s_.steps.size());
  for (size_t i = 0; i < s_.steps.size(); ++i) s_.priority[i] = static_cast<uint32_t>(i);
  // Stream-ordered transports issue everything in (stage, round, step)
  // order, the order every rank uses (NCCL groups must match); without
  // overlap rounds run one after the other. Otherwise the engine tries a
  // step of round r of stage s before those of round r + 2 of stage s - 1.
  if (!info_.stream_ordered && options_.overlap) {
    std::stable_sort(s_.priority.begin(), s_.priority.end(), [&](uint32_t a, uint32_t b) {
      const StepPlan& x = s_.steps[a];
      const StepPlan& y = s_.steps[b];
      const uint64_t wx = uint64_t{x.stage} + s_.rounds[x.round].round;
      const uint64_t wy = uint64_t{y.stage} + s_.rounds[y.round].round;
      return wx < wy;
    });
  }
}

Schedule Builder::build() {
  s_.part = part_;
  exec_detail::validate_pieces(plan_, *part_, part_->local, "local");
  find_mirrored_sends();
  exec_detail::validate_pieces(plan_, *part_, part_->send_pieces, "send_pieces", &part_->sends,
                               &mirrored_pieces_);
  exec_detail::validate_pieces(plan_, *part_, part_->recv_pieces, "recv_pieces", &part_->recvs);
  add_targets();
  add_scratch(*part_, process_);
  writers_ = std::make_unique<stage_deps::WriterIndex>(plan_, *part_, true);
  s_.direct.reserve(part_->local.size() + part_->recv_pieces.size());
  for (size_t i = 0; i < part_->local.size(); ++i) add_local(i);
  for (size_t i = 0; i < part_->sends.size(); ++i) add_send(part_->sends[i], i);
  for (size_t i = 0; i < part_->recvs.size(); ++i) add_recv(part_->recvs[i], i);
  check_scratch_order();
  build_rounds();
  order_contributions();
  sort_direct();
  resolve_deps();
  return std::move(s_);
}

Schedule Builder::build_whole() {
  whole_ = true;
  add_targets();
  for (const auto& [process, part] : plan_.parts()) add_scratch(part, process);
  size_t pieces = 0;
  for (const auto& [process, part] : plan_.parts()) {
    pieces += part.local.size() + part.recv_pieces.size();
  }
  s_.direct.reserve(pieces);
  for (const auto& [process, part] : plan_.parts()) {
    part_ = &part;
    process_ = process;
    exec_detail::validate_pieces(plan_, part, part.local, "local");
    exec_detail::validate_pieces(plan_, part, part.recv_pieces, "recv_pieces", &part.recvs);
    for (size_t i = 0; i < part.local.size(); ++i) add_local(i);
    // Every message is a direct copy on the receiving side; the sender's
    // view of it (sends, send_pieces) holds the same pieces.
    for (size_t i = 0; i < part.recvs.size(); ++i) {
      const Message& m = part.recvs[i];
      if (process_of(m.dst_device) != process_) {
        fail(ErrorCode::kInvalidArgument, where("recvs", i) + "destination device " +
                                              std::to_string(m.dst_device) +
                                              " is not on this process");
      }
      const std::span<const Piece> pieces = message_pieces(m, part.recv_pieces, "recvs", i);
      for (const Piece& p : pieces) {
        const TensorSpec& t = tensors_[p.tensor];
        if ((p.dst_entry != kScratchEntry && t.dst.device(p.dst_entry) != m.dst_device) ||
            (p.src_entry != kScratchEntry &&
             from(p, m.stage).device(p.src_entry) != m.src_device)) {
          fail(ErrorCode::kInvalidArgument,
               where("recvs", i) +
                   "a piece reads or writes an entry of another device than the "
                   "message's sender or receiver");
        }
        const int64_t key = round_key(m.stage, m.round);
        // The scratch a piece reads is in its sender's part.
        uint32_t src_scratch = kNoScratch;
        if (p.src_entry == kScratchEntry) {
          src_scratch = scratch_in(plan_.part(process_of(m.src_device)), p.tensor, m.src_device,
                                   plan_.region(part, p));
          note_scratch_read(src_scratch, m.stage, "recvs", i);
        }
        add_direct(p, key, -1, m.stage, m.dst_device, src_scratch);
      }
    }
  }
  check_scratch_order();
  copy_replicas_once();
  order_contributions();
  sort_direct();
  group_reductions();
  return std::move(s_);
}

}  // namespace

Schedule build_schedule(const Plan& plan, int32_t process, const ProcessPart& part,
                        const TransportInfo& transport, const ExecuteOptions& options) {
  return Builder(plan, process, &part, transport, options).build();
}

Schedule build_whole_schedule(const Plan& plan) {
  const TransportInfo info;
  const ExecuteOptions options;
  return Builder(plan, -1, nullptr, info, options).build_whole();
}

}  // namespace reshard::engine_detail
