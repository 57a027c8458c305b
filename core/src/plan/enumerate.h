// Internal: output-sensitive enumeration of the pieces of one tensor
// (docs/design.md §2.1-2.3). Every decision a piece depends on — which cells a
// destination box is cut into, which replica sends each cell, how a cell is
// split across replicas — is a pure function of the tensor, the destination
// entry and the cell, so a process can derive its own pieces from either
// side (receiver or sender) without seeing the rest of the fleet.
//
// The enumeration lives in rooms under plan/enumerate/, one concept each,
// in reading order:
//   types.h        the data: contexts, Emitted, bands, CellHosts, Route
//   cross_layout.h the data of relays across hosts: CellShares, CrossLayout
//   enumerator.h   class Enumerator, declared
//   cells.h        cells, the cover, source choice, even cuts
//   routes.h       which route a region takes; leaders inside a host
//   reduce.h       reduce routes: reduce-scatter, gather, pre-reduction
//   cross.h        relays across hosts: shares, parts, layouts
//   cross_gate.h   when to cross: the host and device rules
//   emit.h         the pieces received, forwarded and sent
// Include this header, not a room: a room holds only part of the
// Enumerator's members.
#pragma once

#include "plan/enumerate/cells.h"
#include "plan/enumerate/cross.h"
#include "plan/enumerate/cross_gate.h"
#include "plan/enumerate/cross_layout.h"
#include "plan/enumerate/emit.h"
#include "plan/enumerate/enumerator.h"
#include "plan/enumerate/reduce.h"
#include "plan/enumerate/routes.h"
#include "plan/enumerate/types.h"
