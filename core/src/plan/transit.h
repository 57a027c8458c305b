// Internal: transit relays' tables (TransitTable, enumerate/types.h), built
// from the layouts and the topology for Context::decide_transit.
#pragma once

#include <memory>

#include "plan/context.h"

namespace reshard::planning {

// Hosts whose busiest NIC group takes in at most this times its share of
// the host's crossing bytes are left alone.
inline constexpr double kTransitGain = 1.05;

// Whether t may have a transit table: one summand, no cast or block scales
// (its scratch holds the source's bytes), relays on, a tiled
// destination (cells of any number of entries) or each destination cell of
// one entry (not fragmented).
bool transit_may_apply(const Context& ctx, const TensorCtx& t);

// Whether build_transit counts a tiled source's crossing bytes per host
// from the host's cells (HostTiles, where cheaper than the cover; the same
// integers): on, and off in tests to compare with the cover's.
bool transit_host_tiles_on();
void set_transit_host_tiles(bool on);

// The transit table of tensor t (one summand, each destination cell of one
// entry), or null where no host gains: per receiving host, the crossing
// bytes each device takes in single-hop (regions no device of its host
// holds) summed per NIC group (reshard::nic_group over the plan's devices
// on the host); each group's share is the host's total times its NICs over
// the NICs of the groups that take bytes in or have an entry of t. Groups
// above their share donate the excess, spread over their devices by what
// each takes in; groups below take it, spread evenly over their devices
// with an entry of t (the transit entry: the device's lowest destination
// entry, or where it has none its lowest source entry, TransitShare::cross).
// An entry with another of its cell on its host counts an equal share of
// their crossing bytes and, where no transit's device holds one of them,
// takes its shares as a leader (TransitTable::lead_shares).
// The sending side likewise over what each device sends out single-hop, a
// transit the lowest source entry or else the lowest destination entry.
// Each donor's excess (at most the takers' room) goes to every taker in
// proportion to its room: per taker a share of each of the donor's
// crossing pieces.
std::unique_ptr<TransitTable> build_transit(const Context& ctx, const TensorCtx& t, Enumerator& en);

}  // namespace reshard::planning
