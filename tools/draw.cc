// Pictures of layouts and traffic, as text (Unicode box drawing) and SVG.
// A layout is drawn like jax.debug.visualize_array_sharding: a grid of boxes,
// sized in proportion to the extents they cover, each labelled with the
// devices holding it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "cli.h"

namespace reshard::cli {
namespace {

constexpr size_t kMaxRows = 32;     // cells along the drawn row dim
constexpr size_t kMaxCols = 24;     // cells along the drawn column dim
constexpr size_t kLabelWidth = 20;  // wrap device lists beyond this
constexpr size_t kMaxLabelLines = 4;

// Display columns of UTF-8 text (every code point we print is one column).
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t p = s.find('\n', start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}

// Wraps a comma-separated list at commas.
std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines{""};
  size_t start = 0;
  for (;;) {
    const size_t p = text.find(',', start);
    std::string item =
        text.substr(start, p == std::string::npos ? std::string::npos : p - start + 1);
    if (!lines.back().empty() && display_width(lines.back()) + display_width(item) > width)
      lines.emplace_back();
    lines.back() += item;
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return lines;
}

// The cells of a layout's picture: the distinct cut points of the drawn dims
// split the tensor into a grid; each cell lists the entries covering it.
// Adjacent cells with the same entries merge into one box when they form a
// rectangle.
struct GridModel {
  bool drawable = false;
  std::string reason;  // when not drawable
  int row_dim = -1;    // -1: one row (rank <= 1)
  int col_dim = -1;    // -1: one column (rank 0)
  std::vector<int64_t> row_cuts{0, 1}, col_cuts{0, 1};
  std::vector<std::string> labels;  // per cell, lines joined by '\n'
  std::vector<std::string> keys;    // per cell, the entry set
  std::vector<size_t> colours;      // per cell, a palette index
  std::vector<size_t> group;        // per cell: the top-left cell of its box
  std::vector<std::string> notes;
  size_t rows() const { return row_cuts.size() - 1; }
  size_t cols() const { return col_cuts.size() - 1; }
  // Box of cells [r0, r1] x [c0, c1] for a group root.
  struct Rect {
    size_t r0, r1, c0, c1;
  };
  std::map<size_t, Rect> rects;
};

// device_ranges, with an arithmetic progression of four or more devices
// (a replica group, e.g. 0,8,16,...,1016) written as its first two and last.
std::string devices_label(std::vector<int64_t> devs) {
  std::sort(devs.begin(), devs.end());
  devs.erase(std::unique(devs.begin(), devs.end()), devs.end());
  if (devs.size() >= 4 && devs[1] - devs[0] > 1) {
    bool progression = true;
    for (size_t i = 2; i < devs.size() && progression; ++i)
      progression = devs[i] - devs[i - 1] == devs[1] - devs[0];
    if (progression)
      return std::to_string(devs[0]) + "," + std::to_string(devs[1]) + ",\xE2\x80\xA6," +
             std::to_string(devs.back());
  }
  return device_ranges(devs);
}

std::string cell_label(const Layout& layout, const std::vector<size_t>& entries) {
  if (entries.empty()) return "(none)";
  std::vector<std::string> lines;
  if (!layout.partial()) {
    std::vector<int64_t> devs;
    for (size_t e : entries) devs.push_back(layout.device(e));
    lines = wrap(devices_label(devs), kLabelWidth);
  } else {
    std::map<int32_t, std::vector<int64_t>> by_summand;
    for (size_t e : entries) by_summand[layout.summand(e)].push_back(layout.device(e));
    for (const auto& [s, devs] : by_summand)
      for (const auto& l :
           wrap("\xCE\xA3" + std::to_string(s) + ":" + devices_label(devs), kLabelWidth))
        lines.push_back(l);
  }
  if (lines.size() > kMaxLabelLines) {
    const size_t n = entries.size();
    lines.resize(kMaxLabelLines - 1);
    lines.push_back("\xE2\x80\xA6 (" + std::to_string(n) + " shards)");
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// The cells of a layout's picture. A drawn dim cut into more than `max_rows`
// (`max_cols`) parts is "too fine to draw", unless `bands`: then runs of
// consecutive parts are drawn as one band each, labelled with every device
// holding part of it (the SVG, at any fleet size).
GridModel make_grid(const Layout& layout, size_t max_rows = kMaxRows, size_t max_cols = kMaxCols,
                    bool bands = false) {
  GridModel g;
  const int rank = layout.rank();
  const auto& shape = layout.shape();
  if (rank >= 1) g.col_dim = rank - 1;
  if (rank >= 2) g.row_dim = rank - 2;
  for (int d = 0; d < rank; ++d)
    if (shape[d] == 0) {
      g.reason = "empty tensor (shape " + shape_str(shape) + "): nothing to draw";
      return g;
    }
  if (rank >= 3) {
    std::string idx = "[";
    for (int d = 0; d < rank; ++d) idx += (d ? ", " : "") + std::string(d < rank - 2 ? "0" : ":");
    g.notes.push_back("rank " + std::to_string(rank) + ": drawing dims " +
                      std::to_string(rank - 2) + " \xC3\x97 " + std::to_string(rank - 1) +
                      " of the slice " + idx + "]");
    for (int d = 0; d < rank - 2; ++d) {
      std::set<int64_t> los;
      for (size_t e = 0; e < layout.num_entries(); ++e)
        if (!layout.box(e).empty()) los.insert(layout.box(e).lo[d]);
      if (los.size() > 1)
        g.notes.push_back("dim " + std::to_string(d) + " is split into " +
                          std::to_string(los.size()) +
                          " parts; other slices are held by other devices");
    }
  }
  // Entries drawn: non-empty and (rank >= 3) holding index 0 of the leading dims.
  std::vector<size_t> drawn;
  std::vector<int64_t> empty_devices;
  for (size_t e = 0; e < layout.num_entries(); ++e) {
    const Box b = layout.box(e);
    if (b.empty()) {
      empty_devices.push_back(layout.device(e));
      continue;
    }
    bool in_slice = true;
    for (int d = 0; d + 2 < rank; ++d) in_slice = in_slice && b.lo[d] == 0;
    if (in_slice) drawn.push_back(e);
  }
  if (!empty_devices.empty())
    g.notes.push_back(std::string("empty shards (uneven split) on ") +
                      (empty_devices.size() == 1 ? "device " : "devices ") +
                      device_ranges(empty_devices));
  auto cuts = [&](int dim) {
    std::set<int64_t> c{0, dim < 0 ? 1 : shape[dim]};
    if (dim >= 0)
      for (size_t e : drawn) {
        c.insert(layout.box(e).lo[dim]);
        c.insert(layout.box(e).hi[dim]);
      }
    return std::vector<int64_t>(c.begin(), c.end());
  };
  g.row_cuts = cuts(g.row_dim);
  g.col_cuts = cuts(g.col_dim);
  // Runs of ceil(parts / max) consecutive parts per band.
  auto band = [&](std::vector<int64_t>& c, size_t max, int dim) {
    const size_t parts = c.size() - 1;
    if (!bands || parts <= max) return;
    const size_t k = (parts + max - 1) / max;
    std::vector<int64_t> b;
    for (size_t i = 0; i < parts; i += k) b.push_back(c[i]);
    b.push_back(c.back());
    g.notes.push_back("dim " + std::to_string(dim) + ": " +
                      with_commas(static_cast<int64_t>(parts)) + " parts drawn in " +
                      std::to_string(b.size() - 1) + " bands of " + std::to_string(k));
    c = std::move(b);
  };
  band(g.row_cuts, max_rows, g.row_dim);
  band(g.col_cuts, max_cols, g.col_dim);
  if (g.rows() > max_rows || g.cols() > max_cols) {
    g.reason = std::to_string(g.rows()) + " \xC3\x97 " + std::to_string(g.cols()) +
               " cells: too fine to draw";
    return g;
  }
  const size_t rows = g.rows(), cols = g.cols();
  std::vector<std::vector<size_t>> cell_entries(rows * cols);
  // The cells [a, b) that [lo, hi) overlaps (lo need not be a cut: bands).
  auto range = [](const std::vector<int64_t>& c, int64_t lo, int64_t hi) {
    const size_t a = static_cast<size_t>(std::upper_bound(c.begin(), c.end(), lo) - c.begin()) - 1;
    const size_t b = static_cast<size_t>(std::lower_bound(c.begin(), c.end(), hi) - c.begin());
    return std::make_pair(a, b);
  };
  for (size_t e : drawn) {
    const Box b = layout.box(e);
    const auto [r0, r1] = g.row_dim < 0 ? std::make_pair(size_t{0}, size_t{1})
                                        : range(g.row_cuts, b.lo[g.row_dim], b.hi[g.row_dim]);
    const auto [c0, c1] = g.col_dim < 0 ? std::make_pair(size_t{0}, size_t{1})
                                        : range(g.col_cuts, b.lo[g.col_dim], b.hi[g.col_dim]);
    for (size_t r = r0; r < r1; ++r)
      for (size_t c = c0; c < c1; ++c) cell_entries[r * cols + c].push_back(e);
  }
  g.labels.resize(rows * cols);
  g.keys.resize(rows * cols);
  g.colours.resize(rows * cols);
  for (size_t i = 0; i < rows * cols; ++i) {
    g.labels[i] = cell_label(layout, cell_entries[i]);
    uint64_t h = 1469598103934665603ull;
    for (size_t e : cell_entries[i]) {
      g.keys[i] += std::to_string(layout.device(e)) + ":" + std::to_string(layout.summand(e)) + " ";
      h = (h ^ static_cast<uint64_t>(layout.device(e))) * 1099511628211ull;
    }
    // One device: its own colour, the same in every picture.
    g.colours[i] = cell_entries[i].size() == 1
                       ? static_cast<size_t>(layout.device(cell_entries[i][0]))
                   : cell_entries[i].empty() ? SIZE_MAX
                                             : static_cast<size_t>(h >> 8);
  }
  // Merge equal neighbours into rectangles.
  g.group.assign(rows * cols, SIZE_MAX);
  for (size_t i = 0; i < rows * cols; ++i) {
    if (g.group[i] != SIZE_MAX) continue;
    // Flood fill the component of cell i.
    std::vector<size_t> comp{i}, stack{i};
    std::vector<char> in(rows * cols, 0);
    in[i] = 1;
    while (!stack.empty()) {
      const size_t x = stack.back();
      stack.pop_back();
      const size_t r = x / cols, c = x % cols;
      const size_t nb[4] = {r > 0 ? x - cols : SIZE_MAX, r + 1 < rows ? x + cols : SIZE_MAX,
                            c > 0 ? x - 1 : SIZE_MAX, c + 1 < cols ? x + 1 : SIZE_MAX};
      for (size_t y : nb)
        if (y != SIZE_MAX && !in[y] && g.group[y] == SIZE_MAX && g.keys[y] == g.keys[i]) {
          in[y] = 1;
          comp.push_back(y);
          stack.push_back(y);
        }
    }
    size_t r0 = rows, r1 = 0, c0 = cols, c1 = 0;
    for (size_t x : comp) {
      r0 = std::min(r0, x / cols);
      r1 = std::max(r1, x / cols);
      c0 = std::min(c0, x % cols);
      c1 = std::max(c1, x % cols);
    }
    if (comp.size() == (r1 - r0 + 1) * (c1 - c0 + 1)) {
      for (size_t x : comp) g.group[x] = i;
      g.rects[i] = {r0, r1, c0, c1};
    } else {
      g.group[i] = i;
      g.rects[i] = {i / cols, i / cols, i % cols, i % cols};
    }
  }
  g.drawable = true;
  return g;
}

std::string describe(const Layout& layout) {
  std::string out = std::to_string(layout.num_entries()) + " shards";
  if (layout.tiled()) {
    std::string counts;
    int64_t cells = 1;
    for (int d = 0; d < layout.rank(); ++d) {
      counts += (d ? "\xC3\x97" : "") + std::to_string(layout.shard_count(d));
      cells *= layout.shard_count(d);
    }
    if (layout.rank() > 0) out += ", tiled " + counts;
    const int64_t copies = cells ? static_cast<int64_t>(layout.num_entries()) / cells /
                                       std::max(layout.num_summands(), 1)
                                 : 0;
    if (copies > 1) out += ", " + std::to_string(copies) + " replicas";
  } else {
    out += ", explicit boxes";
  }
  if (layout.partial())
    out += ", partial: " + std::to_string(layout.num_summands()) + " summands (" +
           std::string(reduce_op_name(layout.reduce_op())) + ")";
  return out;
}

// ---------------------------------------------------------------- text

// Line arms of a canvas position.
enum : uint8_t { kUp = 1, kDown = 2, kLeft = 4, kRight = 8 };

const char* glyph(uint8_t m) {
  switch (m) {
    case kLeft | kRight:
    case kLeft:
    case kRight:
      return "\xE2\x94\x80";  // ─
    case kUp | kDown:
    case kUp:
    case kDown:
      return "\xE2\x94\x82";  // │
    case kDown | kRight:
      return "\xE2\x94\x8C";  // ┌
    case kDown | kLeft:
      return "\xE2\x94\x90";  // ┐
    case kUp | kRight:
      return "\xE2\x94\x94";  // └
    case kUp | kLeft:
      return "\xE2\x94\x98";  // ┘
    case kUp | kDown | kRight:
      return "\xE2\x94\x9C";  // ├
    case kUp | kDown | kLeft:
      return "\xE2\x94\xA4";  // ┤
    case kDown | kLeft | kRight:
      return "\xE2\x94\xAC";  // ┬
    case kUp | kLeft | kRight:
      return "\xE2\x94\xB4";  // ┴
    case kUp | kDown | kLeft | kRight:
      return "\xE2\x94\xBC";  // ┼
    default:
      return " ";
  }
}

// Sizes cells in proportion to their extents, at least as large as labels.
std::vector<size_t> proportional(const std::vector<int64_t>& cuts, const std::vector<size_t>& min,
                                 size_t total) {
  const size_t n = cuts.size() - 1;
  const double scale = static_cast<double>(total) / static_cast<double>(cuts.back() - cuts.front());
  std::vector<size_t> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = std::max(min[i], static_cast<size_t>(
                                  std::lround(static_cast<double>(cuts[i + 1] - cuts[i]) * scale)));
  return out;
}

std::string render_text(const GridModel& g) {
  const size_t rows = g.rows(), cols = g.cols();
  // Minimum interior sizes from labels of single-cell-wide/tall boxes.
  std::vector<size_t> min_w(cols, 3), min_h(rows, 1);
  for (const auto& [root, rc] : g.rects) {
    const auto lines = split_lines(g.labels[root]);
    size_t w = 0;
    for (const auto& l : lines) w = std::max(w, display_width(l));
    if (rc.c0 == rc.c1) min_w[rc.c0] = std::max(min_w[rc.c0], w + 2);
    if (rc.r0 == rc.r1) min_h[rc.r0] = std::max(min_h[rc.r0], lines.size());
  }
  size_t sum_min_w = 0, sum_min_h = 0;
  for (size_t w : min_w) sum_min_w += w;
  for (size_t h : min_h) sum_min_h += h;
  const size_t total_w = std::max<size_t>(sum_min_w, 56);
  std::vector<size_t> w = proportional(g.col_cuts, min_w, total_w);
  std::vector<size_t> h(rows, min_h.empty() ? 1 : min_h[0]);
  if (g.row_dim >= 0) {
    // Characters are about twice as tall as wide.
    const double aspect =
        static_cast<double>(g.row_cuts.back()) / static_cast<double>(g.col_cuts.back());
    const size_t want =
        static_cast<size_t>(std::lround(static_cast<double>(total_w) * aspect * 0.45));
    const size_t total_h = std::clamp<size_t>(want, sum_min_h, std::max<size_t>(sum_min_h, 10));
    h = proportional(g.row_cuts, min_h, total_h);
  }
  // Boxes spanning several cells must fit their labels too.
  for (const auto& [root, rc] : g.rects) {
    const auto lines = split_lines(g.labels[root]);
    size_t lw = 0;
    for (const auto& l : lines) lw = std::max(lw, display_width(l));
    size_t span = rc.c1 - rc.c0;
    for (size_t c = rc.c0; c <= rc.c1; ++c) span += w[c];
    if (span < lw + 2) w[rc.c1] += lw + 2 - span;
    size_t hspan = rc.r1 - rc.r0;
    for (size_t r = rc.r0; r <= rc.r1; ++r) hspan += h[r];
    if (hspan < lines.size()) h[rc.r1] += lines.size() - hspan;
  }
  std::vector<size_t> xs{0}, ys{0};
  for (size_t c = 0; c < cols; ++c) xs.push_back(xs.back() + w[c] + 1);
  for (size_t r = 0; r < rows; ++r) ys.push_back(ys.back() + h[r] + 1);
  const size_t width = xs.back() + 1, height = ys.back() + 1;
  std::vector<uint8_t> arms(width * height, 0);
  std::vector<std::string> text(width * height);
  auto hline = [&](size_t y, size_t x0, size_t x1) {
    for (size_t x = x0; x < x1; ++x) {
      arms[y * width + x] |= kRight;
      arms[y * width + x + 1] |= kLeft;
    }
  };
  auto vline = [&](size_t x, size_t y0, size_t y1) {
    for (size_t y = y0; y < y1; ++y) {
      arms[y * width + x] |= kDown;
      arms[(y + 1) * width + x] |= kUp;
    }
  };
  auto cell = [&](size_t r, size_t c) { return g.group[r * cols + c]; };
  for (size_t r = 0; r <= rows; ++r)
    for (size_t c = 0; c < cols; ++c)
      if (r == 0 || r == rows || cell(r - 1, c) != cell(r, c)) hline(ys[r], xs[c], xs[c + 1]);
  for (size_t c = 0; c <= cols; ++c)
    for (size_t r = 0; r < rows; ++r)
      if (c == 0 || c == cols || cell(r, c - 1) != cell(r, c)) vline(xs[c], ys[r], ys[r + 1]);
  for (size_t i = 0; i < arms.size(); ++i) text[i] = glyph(arms[i]);
  // Labels, centred in their boxes.
  for (const auto& [root, rc] : g.rects) {
    const auto lines = split_lines(g.labels[root]);
    const size_t x0 = xs[rc.c0] + 1, x1 = xs[rc.c1 + 1];  // interior [x0, x1)
    const size_t y0 = ys[rc.r0] + 1, y1 = ys[rc.r1 + 1];
    const size_t top = y0 + (y1 - y0 - std::min(lines.size(), y1 - y0)) / 2;
    for (size_t k = 0; k < lines.size() && top + k < y1; ++k) {
      std::vector<std::string> glyphs;
      for (size_t i = 0; i < lines[k].size();) {
        size_t len = 1;
        while (i + len < lines[k].size() &&
               (static_cast<unsigned char>(lines[k][i + len]) & 0xC0) == 0x80)
          ++len;
        glyphs.push_back(lines[k].substr(i, len));
        i += len;
      }
      const size_t left = x0 + (x1 - x0 - std::min(glyphs.size(), x1 - x0)) / 2;
      for (size_t j = 0; j < glyphs.size() && left + j < x1; ++j)
        text[(top + k) * width + left + j] = glyphs[j];
    }
  }
  std::string out;
  for (size_t y = 0; y < height; ++y) {
    std::string line;
    for (size_t x = 0; x < width; ++x) line += text[y * width + x];
    out += line + "\n";
  }
  return out;
}

// Aggregates traffic by a key (device, or the device's process).
struct Matrix {
  std::vector<std::string> labels;
  std::vector<std::vector<int64_t>> cells;
};

std::string render_matrix(const Matrix& m, const std::string& row_word,
                          const std::string& col_word) {
  const size_t n = m.labels.size();
  size_t cw = 4;
  for (const auto& l : m.labels) cw = std::max(cw, l.size());
  for (const auto& row : m.cells)
    for (int64_t b : row) cw = std::max(cw, display_width(compact_bytes(static_cast<double>(b))));
  size_t lw = row_word.size() + 1;
  for (const auto& l : m.labels) lw = std::max(lw, l.size() + 1);
  auto pad_left = [](const std::string& s, size_t w) {
    const size_t d = display_width(s);
    return std::string(w > d ? w - d : 0, ' ') + s;
  };
  std::string out = std::string(lw, ' ') + "  " + col_word + " \xE2\x86\x92\n";
  out += pad_left(row_word + " \xE2\x86\x93", lw);
  for (size_t j = 0; j < n; ++j) out += " " + pad_left(m.labels[j], cw);
  out += "\n";
  for (size_t i = 0; i < n; ++i) {
    out += pad_left(m.labels[i], lw);
    for (size_t j = 0; j < n; ++j)
      out += " " + pad_left(compact_bytes(static_cast<double>(m.cells[i][j])), cw);
    out += "\n";
  }
  return out;
}

// ---------------------------------------------------------------- SVG

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// Pastel colours (matplotlib tab20, lightened); SIZE_MAX: nobody holds it.
const char* colour(size_t index) {
  static const char* const kPalette[] = {"#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
                                         "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#d6e9f8",
                                         "#ffe0c2", "#cdeec5", "#ffd0cf", "#e4dbec", "#e6d3cf",
                                         "#fbdbea", "#ededc8", "#d0eef2", "#c7c7c7", "#e8e8e8"};
  if (index == SIZE_MAX) return "#ffffff";
  return kPalette[index % (sizeof kPalette / sizeof kPalette[0])];
}

// Text is laid out from an estimate of its extent: monospace glyphs advance
// 0.6 em (DejaVu Sans Mono, Liberation Mono: 0.60 em; kAdvance keeps a
// margin), rise 0.8 em above the baseline and descend 0.2 em below it.
// Every label is placed where that box overlaps no other text, inside the
// picture; tests/cli/cli_test.py (case show_svg_scale) checks it.
constexpr double kAdvance = 0.62;
constexpr double kMinFont = 6;  // smaller labels are left out (the box's <title> has them)

double text_width(const std::string& s, double font) {
  return static_cast<double>(display_width(s)) * kAdvance * font;
}

// `s` cut to at most `width` pixels at `font`, ending in "…" when cut.
std::string fit_text(const std::string& s, double width, double font) {
  const double chars = std::floor(width / (kAdvance * font));
  if (chars < 1) return "";
  const size_t max = static_cast<size_t>(chars);
  if (display_width(s) <= max) return s;
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool starts = (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    if (starts && ++n > max - 1) break;
    out += s[i];
  }
  return out + "\xE2\x80\xA6";
}

std::string svg_text(double x, double y, const std::string& s, const char* extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + extra + ">" + xml_escape(s) +
         "</text>\n";
}

// One line at `font` pixels, cut to `width` pixels.
std::string svg_line(double x, double y, const std::string& s, double font, double width,
                     const std::string& extra = "") {
  const std::string t = fit_text(s, width, font);
  if (t.empty()) return "";
  return svg_text(x, y, t, ("font-size=\"" + num(font) + "\"" + extra).c_str());
}

// Splits `text` into lines of at most `width` columns, breaking after ','
// or '-' (device lists: "0-63,128-191"); a longer part stays whole.
std::vector<std::string> break_lines(const std::string& text, size_t width) {
  std::vector<std::string> parts{""};
  for (size_t i = 0; i < text.size(); ++i) {
    parts.back() += text[i];
    if ((text[i] == ',' || text[i] == '-') && i + 1 < text.size()) parts.emplace_back();
  }
  std::vector<std::string> lines{""};
  for (const auto& p : parts) {
    if (!lines.back().empty() && display_width(lines.back()) + display_width(p) > width)
      lines.emplace_back();
    lines.back() += p;
  }
  return lines;
}

// The label's lines centred in the box [x0, x1] x [y0, y1], re-broken to
// the width that allows the largest font up to `font`; nothing if that
// would be below kMinFont.
std::string svg_centred(const std::vector<std::string>& label, double x0, double x1, double y0,
                        double y1, double font, const std::string& extra = "") {
  size_t widest = 1;
  for (const auto& l : label) widest = std::max(widest, display_width(l));
  std::vector<std::string> best;
  double best_font = 0;
  for (size_t width = widest; width >= 1; --width) {
    std::vector<std::string> lines;
    for (const auto& l : label)
      for (auto& part : break_lines(l, width)) lines.push_back(std::move(part));
    size_t longest = 1;
    for (const auto& l : lines) longest = std::max(longest, display_width(l));
    const double f = std::min({font, (x1 - x0 - 4) / (kAdvance * static_cast<double>(longest)),
                               (y1 - y0 - 2) / (1.15 * static_cast<double>(lines.size()))});
    if (f > best_font + 0.25) {
      best_font = f;
      best = std::move(lines);
    }
    if (best_font >= font) break;
  }
  if (best_font < kMinFont) return "";
  font = std::floor(best_font * 2) / 2;
  const double n = static_cast<double>(best.size());
  const double top = (y0 + y1) / 2 - 1.15 * font * n / 2;
  std::string out;
  for (size_t k = 0; k < best.size(); ++k)
    out +=
        svg_text((x0 + x1) / 2, top + 1.15 * font * static_cast<double>(k) + 0.875 * font, best[k],
                 ("font-size=\"" + num(font) + "\" text-anchor=\"middle\"" + extra).c_str());
  return out;
}

// Draws a grid at (x, y) within w pixels; returns the height used.
double svg_grid(std::string& out, const GridModel& g, double x, double y, double w) {
  if (!g.drawable) {
    out += svg_line(x, y + 14, g.reason, 12, w);
    return 24;
  }
  // In proportion to the extents, at least 14 pixels a row of boxes.
  double h = 48;
  if (g.row_dim >= 0)
    h = std::clamp(
        w * static_cast<double>(g.row_cuts.back()) / static_cast<double>(g.col_cuts.back()),
        std::min(std::max(60.0, 14.0 * static_cast<double>(g.rows())), 320.0), 320.0);
  auto pos = [](const std::vector<int64_t>& cuts, size_t i, double origin, double size) {
    return origin + size * static_cast<double>(cuts[i] - cuts.front()) /
                        static_cast<double>(cuts.back() - cuts.front());
  };
  for (const auto& [root, rc] : g.rects) {
    const double x0 = pos(g.col_cuts, rc.c0, x, w), x1 = pos(g.col_cuts, rc.c1 + 1, x, w);
    const double y0 = pos(g.row_cuts, rc.r0, y, h), y1 = pos(g.row_cuts, rc.r1 + 1, y, h);
    const auto lines = split_lines(g.labels[root]);
    std::string all;
    for (const auto& l : lines) all += (all.empty() ? "" : " ") + l;
    out += "<rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" +
           num(std::max(x1 - x0, 1.0)) + "\" height=\"" + num(std::max(y1 - y0, 1.0)) +
           "\" fill=\"" + colour(g.colours[root]) +
           "\" stroke=\"#333\" stroke-width=\"1\"><title>" + xml_escape(all) + "</title></rect>\n";
    out += svg_centred(lines, x0, x1, y0, y1, 11);
  }
  double used = h;
  for (const auto& note : g.notes) {
    used += 14;
    out += svg_line(x, y + used, note, 10, w, " fill=\"#555\"");
  }
  return used + 6;
}

}  // namespace

// ---------------------------------------------------------------- public

std::string draw_layout_text(const Layout& layout) {
  const GridModel g = make_grid(layout);
  std::string out = "  " + describe(layout) + "\n";
  for (const auto& note : g.notes) out += "  (" + note + ")\n";
  if (!g.drawable) {
    out += "  " + g.reason + "\n";
    // Still say who holds what, for the first few shards.
    const size_t n = std::min<size_t>(layout.num_entries(), 8);
    for (size_t e = 0; e < n; ++e)
      out += "    device " + std::to_string(layout.device(e)) + ": " + to_string(layout.box(e)) +
             (layout.partial() ? " summand " + std::to_string(layout.summand(e)) : "") + "\n";
    if (layout.num_entries() > n)
      out += "    ... " + std::to_string(layout.num_entries() - n) + " more shards\n";
    return out;
  }
  if (layout.rank() == 0) out += "  (scalar)\n";
  return out + render_text(g);
}

Traffic traffic_of(const Plan& plan, const std::vector<int64_t>& devices) {
  Traffic t;
  t.devices = devices;
  t.topology = plan.topology();
  for (const auto& [process, part] : plan.parts()) {
    for (const Message& m : part.sends) {
      t.bytes[{m.src_device, m.dst_device}] += m.bytes;
      if (m.stage > 0) t.forwarded[{m.src_device, m.dst_device}] += m.bytes;
    }
    for (const Piece& p : part.local) {
      // (A local piece into a scratch stays on its source's device.)
      const int64_t d = plan.tensors()[p.tensor].src.device(p.src_entry);
      t.bytes[{d, d}] += plan.piece_bytes(part, p);
    }
  }
  return t;
}

// What relays forward: the total, and the heaviest relay → destination pairs.
std::string forwarded_text(const Traffic& traffic) {
  if (traffic.forwarded.empty()) return "";
  int64_t total = 0;
  std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> pairs;
  for (const auto& [k, b] : traffic.forwarded) {
    total += b;
    pairs.push_back({b, k});
  }
  std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::string out = "forwarded by relays (stages after the first, included above): " +
                    human_bytes(static_cast<double>(total)) + " over " +
                    with_commas(static_cast<int64_t>(pairs.size())) + " device pairs\n";
  for (size_t i = 0; i < pairs.size() && i < 8; ++i)
    out += "  relay " + std::to_string(pairs[i].second.first) + " \xE2\x86\x92 " +
           std::to_string(pairs[i].second.second) + "  " +
           human_bytes(static_cast<double>(pairs[i].first)) + "\n";
  return out;
}

std::string draw_traffic_text(const Traffic& traffic) {
  const auto& devs = traffic.devices;
  std::string out;
  if (devs.size() <= 32) {
    Matrix m;
    std::map<int64_t, size_t> index;
    for (size_t i = 0; i < devs.size(); ++i) {
      index[devs[i]] = i;
      m.labels.push_back(std::to_string(devs[i]));
    }
    m.cells.assign(devs.size(), std::vector<int64_t>(devs.size(), 0));
    for (const auto& [k, b] : traffic.bytes) m.cells[index.at(k.first)][index.at(k.second)] += b;
    out += "bytes sent, source device \xE2\x86\x92 destination device (diagonal: local copies)\n";
    return out + render_matrix(m, "src", "dst") + forwarded_text(traffic);
  }
  // Many devices: by process, then the heaviest device pairs.
  std::map<int32_t, size_t> pindex;
  for (int64_t d : devs) pindex.emplace(traffic.topology.info(d).process, 0);
  if (pindex.size() > 1 && pindex.size() <= 32) {
    Matrix m;
    size_t i = 0;
    for (auto& [p, idx] : pindex) {
      idx = i++;
      m.labels.push_back(std::to_string(p));
    }
    m.cells.assign(pindex.size(), std::vector<int64_t>(pindex.size(), 0));
    for (const auto& [k, b] : traffic.bytes)
      m.cells[pindex.at(traffic.topology.info(k.first).process)]
             [pindex.at(traffic.topology.info(k.second).process)] += b;
    out += std::to_string(devs.size()) +
           " devices: bytes by process, source \xE2\x86\x92 destination (diagonal: within a "
           "process)\n";
    out += render_matrix(m, "src", "dst");
  } else {
    out += std::to_string(devs.size()) + " devices: too many for a matrix\n";
  }
  std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> pairs;
  for (const auto& [k, b] : traffic.bytes)
    if (k.first != k.second) pairs.push_back({b, k});
  std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  out += "heaviest device pairs (of " + with_commas(static_cast<int64_t>(pairs.size())) + "):\n";
  for (size_t i = 0; i < pairs.size() && i < 10; ++i)
    out += "  " + std::to_string(pairs[i].second.first) + " \xE2\x86\x92 " +
           std::to_string(pairs[i].second.second) + "  " +
           human_bytes(static_cast<double>(pairs[i].first)) + "\n";
  return out + forwarded_text(traffic);
}

void Svg::title(const std::string& text) {
  y_ += 20;
  body_ += svg_line(10, y_, text, 16, width_ - 20, " font-weight=\"bold\"");
  y_ += 10;
}

void Svg::layouts(const std::string& heading, const Layout& src, const Layout& dst) {
  if (groups_ >= kMaxGroups) {
    ++omitted_;
    return;
  }
  ++groups_;
  y_ += 18;
  body_ += svg_line(10, y_, heading, 13, width_ - 20, " font-weight=\"bold\"");
  y_ += 8;
  const double w = 380;
  body_ += svg_line(10, y_ + 12, "source: " + describe(src), 11, w);
  body_ += svg_line(430, y_ + 12, "destination: " + describe(dst), 11, w);
  y_ += 20;
  // Parts beyond 16 along a dim are drawn as bands: at most 16 x 16 boxes.
  const double h1 = svg_grid(body_, make_grid(src, 16, 16, true), 10, y_, w);
  const double h2 = svg_grid(body_, make_grid(dst, 16, 16, true), 430, y_, w);
  y_ += std::max(h1, h2) + 10;
}

void Svg::flush_omitted() {
  if (omitted_ == 0) return;
  y_ += 18;
  body_ += svg_line(10, y_,
                    std::to_string(omitted_) + " more layout pairs not drawn (at most " +
                        std::to_string(kMaxGroups) + "; --tensor NAME draws one tensor)",
                    12, width_ - 20);
  omitted_ = 0;
}

void Svg::traffic(const Traffic& traffic) {
  flush_omitted();
  const auto& devs = traffic.devices;
  if (devs.empty()) return;
  // The matrix's units: devices up to 32; beyond, hosts (devices when all
  // are on one host); beyond kMaxUnits of those, bands of consecutive ones.
  constexpr size_t kMaxDeviceMatrix = 32, kMaxUnits = 128;
  std::map<int64_t, int64_t> key_of;  // device -> host or device id
  std::set<int64_t> hosts;
  for (int64_t d : devs) hosts.insert(traffic.topology.info(d).host);
  const bool by_host = devs.size() > kMaxDeviceMatrix && hosts.size() > 1;
  for (int64_t d : devs) key_of[d] = by_host ? traffic.topology.info(d).host : d;
  std::vector<int64_t> keys;
  for (const auto& [d, k] : key_of) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const size_t per = std::max<size_t>(1, (keys.size() + kMaxUnits - 1) / kMaxUnits);  // per unit
  const size_t n = (keys.size() + per - 1) / per;
  std::map<int64_t, size_t> unit_of_key;
  std::vector<std::string> labels(n);
  for (size_t i = 0; i < keys.size(); ++i) unit_of_key[keys[i]] = i / per;
  for (size_t u = 0; u < n; ++u) {
    const size_t first = u * per, last = std::min(keys.size(), first + per) - 1;
    labels[u] = std::to_string(keys[first]) +
                (last > first ? "-" + std::to_string(keys[last]) : std::string());
  }
  std::vector<std::vector<int64_t>> m(n, std::vector<int64_t>(n, 0));
  int64_t max_bytes = 1, within = 0, between = 0;
  for (const auto& [k, b] : traffic.bytes) {
    const size_t i = unit_of_key.at(key_of.at(k.first)), j = unit_of_key.at(key_of.at(k.second));
    m[i][j] += b;
    (i == j ? within : between) += b;
  }
  for (const auto& row : m)
    for (int64_t b : row) max_bytes = std::max(max_bytes, b);
  const std::string unit = by_host ? "host" : "device";
  const std::string units =
      per > 1 ? unit + "s (bands of " + std::to_string(per) + " " + unit + "s)" : unit;

  y_ += 18;
  body_ += svg_line(10, y_, "bytes sent: row = source " + units + ", column = destination " + units,
                    13, width_ - 20, " font-weight=\"bold\"");
  y_ += 16;
  body_ += svg_line(10, y_,
                    with_commas(static_cast<int64_t>(devs.size())) + " devices on " +
                        with_commas(static_cast<int64_t>(hosts.size())) +
                        (hosts.size() == 1 ? " host" : " hosts") + "; between " + unit +
                        (per > 1 ? " bands " : "s ") + human_bytes(static_cast<double>(between)) +
                        ", within (diagonal, green) " + human_bytes(static_cast<double>(within)),
                    11, width_ - 20);
  y_ += 4;

  const double cell = std::min(40.0, 640.0 / static_cast<double>(n));
  const double font = 10;
  double label_w = 0;
  for (const auto& l : labels) label_w = std::max(label_w, text_width(l, font));
  // Every step-th label (a power of two), so that neighbours never touch.
  const double need = std::max((label_w + 4) / cell, 1.2 * font / cell);
  size_t step = 1;
  while (static_cast<double>(step) < need) step *= 2;
  const size_t col_step = step, row_step = step;
  const double x0 = std::max(50.0, 16 + label_w), y0 = y_ + 22;
  for (size_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(i) * cell + cell / 2;
    if (i % col_step == 0)
      body_ += svg_text(x0 + p, y0 - 6, labels[i], "font-size=\"10\" text-anchor=\"middle\"");
    if (i % row_step == 0)
      body_ +=
          svg_text(x0 - 6, y0 + p + 0.3 * font, labels[i], "font-size=\"10\" text-anchor=\"end\"");
  }
  const double side = cell * static_cast<double>(n);
  body_ += "<rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(side) +
           "\" height=\"" + num(side) +
           "\" fill=\"white\" stroke=\"#999\" stroke-width=\"0.5\"/>\n";
  // White to blue; the diagonal in green. Large matrices: 16 shades, and runs
  // of equal cells along a row drawn as one box (the file stays small).
  const bool fine = n <= kMaxDeviceMatrix;
  auto fill_of = [&](size_t i, size_t j) {
    double f = static_cast<double>(m[i][j]) / static_cast<double>(max_bytes);
    if (!fine) f = std::ceil(f * 16) / 16;
    char fill[16];
    if (i == j && m[i][j] > 0)
      std::snprintf(fill, sizeof fill, "#%02x%02x%02x", static_cast<int>(255 - 140 * f), 230,
                    static_cast<int>(255 - 140 * f));
    else
      std::snprintf(fill, sizeof fill, "#%02x%02x%02x", static_cast<int>(255 - 200 * f),
                    static_cast<int>(255 - 150 * f), 255);
    return std::string(fill);
  };
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n;) {
      if (m[i][j] == 0 && !fine) {
        ++j;
        continue;
      }
      size_t k = j + 1;
      const std::string fill = fill_of(i, j);
      if (!fine)
        while (k < n && k != i && j != i && m[i][k] != 0 && fill_of(i, k) == fill) ++k;
      const double x = x0 + static_cast<double>(j) * cell, y = y0 + static_cast<double>(i) * cell;
      body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" +
               num(cell * static_cast<double>(k - j)) + "\" height=\"" + num(cell) + "\" fill=\"" +
               fill + "\"";
      if (fine) {
        body_ += " stroke=\"#999\" stroke-width=\"0.5\"><title>" + labels[i] + " \xE2\x86\x92 " +
                 labels[j] + ": " + human_bytes(static_cast<double>(m[i][j])) + "</title></rect>\n";
        const std::string b = compact_bytes(static_cast<double>(m[i][j]));
        if (m[i][j] > 0 && text_width(b, 9) <= cell - 4 && cell >= 14)
          body_ +=
              svg_text(x + cell / 2, y + cell / 2 + 3, b,
                       i != j && static_cast<double>(m[i][j]) > 0.5 * static_cast<double>(max_bytes)
                           ? "font-size=\"9\" text-anchor=\"middle\" fill=\"white\""
                           : "font-size=\"9\" text-anchor=\"middle\"");
      } else {
        body_ += "/>\n";
      }
      j = k;
    }
  // Legend: the shades of 0, 1/4, ..., all of the largest cell.
  y_ = y0 + side + 16;
  body_ += svg_text(10, y_ + 10, "per cell:", "font-size=\"10\"");
  for (int q = 0; q <= 4; ++q) {
    const double f = q / 4.0;
    char fill[16];
    std::snprintf(fill, sizeof fill, "#%02x%02x%02x", static_cast<int>(255 - 200 * f),
                  static_cast<int>(255 - 150 * f), 255);
    body_ += "<rect x=\"" + num(80 + 24 * q) + "\" y=\"" + num(y_) +
             "\" width=\"24\" height=\"12\" fill=\"" + fill +
             "\" stroke=\"#999\" stroke-width=\"0.5\"/>\n";
  }
  body_ += svg_line(206, y_ + 10, "0 to " + human_bytes(static_cast<double>(max_bytes)), 10, 300);
  y_ += 22;
}

void Svg::totals(const std::vector<DeviceTraffic>& per_device, const Topology& topology,
                 const std::string& why) {
  flush_omitted();
  if (per_device.empty()) return;
  // Units: hosts (devices when all are on one host); beyond kMaxUnits, bands.
  constexpr size_t kMaxUnits = 1024, kColumns = 16;
  std::set<int64_t> hosts;
  for (const DeviceTraffic& t : per_device) hosts.insert(topology.info(t.device).host);
  const bool by_host = hosts.size() > 1;
  std::map<int64_t, std::pair<int64_t, int64_t>> by_key;  // key -> (sent, received)
  for (const DeviceTraffic& t : per_device) {
    auto& v = by_key[by_host ? topology.info(t.device).host : t.device];
    v.first += t.send_bytes;
    v.second += t.recv_bytes;
  }
  std::vector<int64_t> keys;
  for (const auto& [k, v] : by_key) keys.push_back(k);
  const size_t per = std::max<size_t>(1, (keys.size() + kMaxUnits - 1) / kMaxUnits);
  const size_t n = (keys.size() + per - 1) / per;
  std::vector<std::string> labels(n);
  std::vector<int64_t> sent(n, 0), received(n, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    sent[i / per] += by_key[keys[i]].first;
    received[i / per] += by_key[keys[i]].second;
  }
  for (size_t u = 0; u < n; ++u) {
    const size_t first = u * per, last = std::min(keys.size(), first + per) - 1;
    labels[u] = std::to_string(keys[first]) +
                (last > first ? "-" + std::to_string(keys[last]) : std::string());
  }
  const std::string unit = by_host ? "host" : "device";
  y_ += 18;
  body_ += svg_line(10, y_,
                    "bytes sent and received per " + unit +
                        (per > 1 ? " band (" + std::to_string(per) + " " + unit + "s)" : ""),
                    13, width_ - 20, " font-weight=\"bold\"");
  y_ += 16;
  body_ += svg_line(10, y_, why, 11, width_ - 20);
  y_ += 8;
  const size_t cols = std::min(n, kColumns), rows = (n + cols - 1) / cols;
  const double cw = 380.0 / static_cast<double>(cols), ch = std::min(cw, 22.0);
  auto grid = [&](const std::vector<int64_t>& v, double x, const std::string& verb) {
    body_ += svg_line(x, y_ + 12, unit + "s, " + verb, 11, 380);
    int64_t max = 1;
    for (int64_t b : v) max = std::max(max, b);
    const double y = y_ + 18;
    for (size_t u = 0; u < n; ++u) {
      const double f = static_cast<double>(v[u]) / static_cast<double>(max);
      char fill[16];
      std::snprintf(fill, sizeof fill, "#%02x%02x%02x", static_cast<int>(255 - 200 * f),
                    static_cast<int>(255 - 150 * f), 255);
      const double x0 = x + static_cast<double>(u % cols) * cw,
                   y0 = y + static_cast<double>(u / cols) * ch;
      body_ += "<rect x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(cw) +
               "\" height=\"" + num(ch) + "\" fill=\"" + fill +
               "\" stroke=\"#999\" stroke-width=\"0.5\"><title>" + unit + " " + labels[u] + " " +
               verb + " " + human_bytes(static_cast<double>(v[u])) + "</title></rect>\n";
      body_ +=
          svg_centred({labels[u]}, x0, x0 + cw, y0, y0 + ch, 9, f > 0.5 ? " fill=\"white\"" : "");
    }
    body_ += svg_line(x, y + static_cast<double>(rows) * ch + 14,
                      "0 (white) to " + human_bytes(static_cast<double>(max)) + " (blue)", 10, 380);
  };
  grid(sent, 10, "sent");
  grid(received, 430, "received");
  y_ += 18 + static_cast<double>(rows) * ch + 24;
}

std::string Svg::finish() {
  flush_omitted();
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         num(width_) + "\" height=\"" + num(y_ + 10) + "\" viewBox=\"0 0 " + num(width_) + " " +
         num(y_ + 10) +
         "\" font-family=\"monospace\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" +
         body_ + "</svg>\n";
}

}  // namespace reshard::cli
