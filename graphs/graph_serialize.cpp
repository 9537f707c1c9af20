#include "graphs/graph_serialize.h"

#include <bit>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "engine/error.h"
#include "engine/version.h"

namespace hg::graphs {

namespace {

constexpr char kMagic[8] = {'H', 'G', 'G', 'R', 'A', 'P', 'H', '\0'};
constexpr uint32_t kMaxRank = 16;
constexpr size_t kMaxString = size_t{1} << 30;

class Writer {
 public:
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  template <class T>
  void pod(T v) {
    raw(&v, sizeof v);
  }
  void str(std::string_view s) {
    pod(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(std::span<const uint8_t> b, const std::string& what, size_t base = 0) : b_(b), what_(what), base_(base) {}
  [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg); }
  [[noreturn]] void fail_at(size_t pos, const std::string& msg) const {
    throw FormatError("graph cache entry " + what_ + ": " + msg + " (byte offset " + std::to_string(base_ + pos) + ")");
  }
  void need(size_t n, const char* field) const {
    if (n > b_.size() - pos_)
      fail(std::string("truncated: ") + field + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(b_.size() - pos_) + " left");
  }
  template <class T>
  T pod(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str(const char* field) {
    const auto n = pod<uint32_t>(field);
    if (n > kMaxString) fail(std::string(field) + " length " + std::to_string(n) + " is absurd");
    need(n, field);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  // A count of items of at least `min_item` bytes each: rejected when the rest cannot hold them.
  uint32_t count(const char* field, size_t min_item) {
    const size_t at = pos_;
    const auto n = pod<uint32_t>(field);
    if (static_cast<uint64_t>(n) * min_item > b_.size() - pos_)
      fail_at(at, std::string(field) + " " + std::to_string(n) + " does not fit in the " +
                      std::to_string(b_.size() - pos_) + " bytes left");
    return n;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  std::span<const uint8_t> take(size_t n, const char* field) {
    need(n, field);
    auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& what_;
  size_t base_;
  size_t pos_ = 0;
};

void write_meta(Writer& w, const TensorMeta& m) {
  w.pod(static_cast<uint8_t>(m.dtype));
  w.pod(static_cast<uint32_t>(m.shape.size()));
  for (int64_t d : m.shape) w.pod(d);
}

TensorMeta read_meta(Reader& r, const std::string& node) {
  TensorMeta m;
  const size_t at = r.pos();
  const auto dt = r.pod<uint8_t>("dtype");
  if (dt >= std::size(kAllDTypes)) r.fail_at(at, node + ": dtype code " + std::to_string(dt) + " does not exist");
  m.dtype = static_cast<DType>(dt);
  const auto rank = r.pod<uint32_t>("rank");
  if (rank > kMaxRank) r.fail_at(at, node + ": rank " + std::to_string(rank) + " is absurd");
  int64_t bytes = static_cast<int64_t>(dtype_size(m.dtype));
  for (uint32_t k = 0; k < rank; ++k) {
    const size_t dim_at = r.pos();
    const auto d = r.pod<int64_t>("dimension");
    if (d < 0) r.fail_at(dim_at, node + ": negative dimension " + std::to_string(d));
    if (d > 0 && bytes > kMaxTensorBytes / d) r.fail_at(dim_at, node + ": shape larger than 1 TiB");
    bytes = d == 0 ? 0 : bytes * d;
    m.shape.push_back(d);
  }
  return m;
}

}  // namespace

const std::string& engine_version() {
  static const std::string v = std::string("hgraph ") + hg::version() + "+" + HG_GIT_COMMIT + " graph-format " +
                               std::to_string(kGraphFormatVersion);
  return v;
}

const std::string& cpu_isa() {
  static const std::string isa = [] {
#if defined(__x86_64__) || defined(__i386__)
    // Read with cpuid directly (clang 14's __builtin_cpu_supports knows no "f16c"), counting an
    // AVX or AVX-512 feature only when the OS saves its registers (XCR0), as GCC's
    // __builtin_cpu_supports does: the string is the one GCC builds wrote before.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const unsigned max_leaf = __get_cpuid_max(0, nullptr);
    unsigned leaf1_ecx = 0, leaf7_ebx = 0, leaf7_ecx = 0, leaf7_1_eax = 0;
    if (max_leaf >= 1 && __get_cpuid(1, &eax, &ebx, &ecx, &edx)) leaf1_ecx = ecx;
    if (max_leaf >= 7) {
      __cpuid_count(7, 0, eax, ebx, ecx, edx);
      leaf7_ebx = ebx;
      leaf7_ecx = ecx;
      if (eax >= 1) {
        __cpuid_count(7, 1, eax, ebx, ecx, edx);
        leaf7_1_eax = eax;
      }
    }
    uint64_t xcr0 = 0;
    if (leaf1_ecx & bit_OSXSAVE) {
      uint32_t lo, hi;
      __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = (uint64_t{hi} << 32) | lo;
    }
    constexpr uint64_t kAvxState = 0x6;     // SSE, YMM
    constexpr uint64_t kAvx512State = 0xe6; // SSE, YMM, opmask, ZMM0-15 upper halves, ZMM16-31
    const bool avx = (xcr0 & kAvxState) == kAvxState;
    const bool avx512 = (xcr0 & kAvx512State) == kAvx512State;
    const std::pair<const char*, bool> features[] = {
        {"sse4.2", (leaf1_ecx & bit_SSE4_2) != 0},
        {"avx", avx && (leaf1_ecx & bit_AVX)},
        {"avx2", avx && (leaf7_ebx & bit_AVX2)},
        {"fma", avx && (leaf1_ecx & bit_FMA)},
        {"f16c", avx && (leaf1_ecx & bit_F16C)},
        {"avx512f", avx512 && (leaf7_ebx & bit_AVX512F)},
        {"avx512bw", avx512 && (leaf7_ebx & bit_AVX512BW)},
        {"avx512vl", avx512 && (leaf7_ebx & bit_AVX512VL)},
        {"avx512dq", avx512 && (leaf7_ebx & bit_AVX512DQ)},
        {"avx512vnni", avx512 && (leaf7_ecx & bit_AVX512VNNI)},
        {"avx512bf16", avx512 && (leaf7_1_eax & bit_AVX512BF16)},
    };
    std::string s = "x86_64";
    for (auto [name, on] : features)
      if (on) s += std::string(" ") + name;
    return s;
#elif defined(__aarch64__)
    return std::string("aarch64");
#else
    return std::string("unknown");
#endif
  }();
  return isa;
}

std::vector<uint8_t> serialize_graph(const Graph& g) {
  Writer w;
  w.pod(static_cast<uint32_t>(g.nodes.size()));
  w.pod(static_cast<uint32_t>(g.num_inputs));
  for (const Node& n : g.nodes) {
    const bool input = n.kind == Node::Kind::Input;
    w.pod(static_cast<uint8_t>(input ? 0 : 1));
    w.pod(static_cast<uint8_t>((n.frozen ? 1 : 0) | (n.constant ? 2 : 0)));
    if (input) {
      w.pod(static_cast<int32_t>(n.input_index));
    } else {
      w.str(n.op->name);
      w.pod(static_cast<uint32_t>(n.inputs.size()));
      for (int i : n.inputs) w.pod(static_cast<int32_t>(i));
      w.pod(static_cast<uint32_t>(n.attrs.ints.size()));
      for (int64_t v : n.attrs.ints) w.pod(v);
      w.pod(static_cast<uint32_t>(n.attrs.floats.size()));
      for (double v : n.attrs.floats) w.pod(v);
      w.pod(static_cast<uint32_t>(n.fused.size()));
      for (const auto& f : n.fused) w.str(f);
      w.pod(static_cast<uint32_t>(n.block));
    }
    write_meta(w, n.meta);
  }
  w.pod(static_cast<uint32_t>(g.outputs.size()));
  for (int o : g.outputs) w.pod(static_cast<int32_t>(o));
  return std::move(w.out);
}

namespace {

Graph read_graph(Reader& r) {
  Graph g;
  const uint32_t n = r.count("node count", 2);
  const auto num_inputs = r.pod<uint32_t>("input count");
  if (num_inputs > n) r.fail("input count " + std::to_string(num_inputs) + " exceeds the node count " + std::to_string(n));
  g.nodes.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const size_t at = r.pos();
    std::string name = "node %" + std::to_string(i);
    Node node;
    const auto kind = r.pod<uint8_t>("node kind");
    if (kind > 1) r.fail_at(at, name + ": kind " + std::to_string(kind) + " does not exist");
    const auto flags = r.pod<uint8_t>("node flags");
    if (flags > 3) r.fail_at(at, name + ": flags " + std::to_string(flags) + " are not valid");
    node.frozen = flags & 1;
    node.constant = flags & 2;
    size_t block_at = 0;
    if (kind == 0) {
      node.kind = Node::Kind::Input;
      const size_t idx_at = r.pos();
      node.input_index = r.pod<int32_t>("input index");
      if (node.input_index != g.num_inputs)
        r.fail_at(idx_at, name + ": input index " + std::to_string(node.input_index) + ", expected " +
                              std::to_string(g.num_inputs));
      if (node.constant) r.fail_at(at, name + ": an input cannot be constant");
      g.num_inputs++;
    } else {
      const size_t op_at = r.pos();
      const std::string op = r.str("op name");
      try {
        node.op = &op_schema(op);
      } catch (const NotFoundError&) {
        r.fail_at(op_at, name + ": op '" + op + "' does not exist in this engine");
      }
      name += " (" + op + ")";
      if (node.frozen) r.fail_at(at, name + ": an op cannot be frozen");
      const uint32_t nin = r.count("op input count", 4);
      if (node.op->num_inputs >= 0 && nin != static_cast<uint32_t>(node.op->num_inputs))
        r.fail_at(op_at, name + ": " + std::to_string(nin) + " inputs, the op takes " +
                             std::to_string(node.op->num_inputs));
      if (node.op->num_inputs < 0 && nin == 0) r.fail_at(op_at, name + ": no inputs, the op takes one or more");
      for (uint32_t k = 0; k < nin; ++k) {
        const size_t in_at = r.pos();
        const auto id = r.pod<int32_t>("op input id");
        if (id < 0 || static_cast<uint32_t>(id) >= i)
          r.fail_at(in_at, name + ": input " + std::to_string(k) + " refers to node " + std::to_string(id) +
                               ", not an earlier node");
        node.inputs.push_back(id);
      }
      const uint32_t nints = r.count("int attribute count", 8);
      for (uint32_t k = 0; k < nints; ++k) node.attrs.ints.push_back(r.pod<int64_t>("int attribute"));
      const uint32_t nfloats = r.count("float attribute count", 8);
      for (uint32_t k = 0; k < nfloats; ++k) node.attrs.floats.push_back(r.pod<double>("float attribute"));
      const uint32_t nfused = r.count("fused op count", 4);
      for (uint32_t k = 0; k < nfused; ++k) node.fused.push_back(r.str("fused op name"));
      block_at = r.pos();
      node.block = r.pod<uint32_t>("channel block");
    }
    const size_t meta_at = r.pos();
    node.meta = read_meta(r, name);
    if (node.block != 0 && (node.meta.shape.size() != 5 || node.meta.shape[4] != node.block))
      r.fail_at(block_at, name + ": channel block " + std::to_string(node.block) + " does not match its shape");
    if (node.kind == Node::Kind::Op) {
      std::vector<TensorMeta> in;
      for (int id : node.inputs) in.push_back(g.nodes[id].meta);
      TensorMeta inferred;
      try {
        inferred = node.op->infer(*node.op, in, node.attrs);
      } catch (const std::exception& e) {  // hg::Error, or e.g. length_error on absurd attributes
        r.fail_at(meta_at, name + ": shape inference rejects its inputs: " + e.what());
      }
      if (inferred != node.meta)
        r.fail_at(meta_at, name + ": recorded as " + meta_str(node.meta) + " but its inputs give " + meta_str(inferred));
    }
    g.nodes.push_back(std::move(node));
  }
  if (static_cast<uint32_t>(g.num_inputs) != num_inputs)
    r.fail("input count " + std::to_string(num_inputs) + " but " + std::to_string(g.num_inputs) + " input nodes");
  const uint32_t nout = r.count("output count", 4);
  if (nout == 0) r.fail("the graph has no outputs");
  for (uint32_t k = 0; k < nout; ++k) {
    const size_t at = r.pos();
    const auto o = r.pod<int32_t>("output id");
    if (o < 0 || static_cast<uint32_t>(o) >= n)
      r.fail_at(at, "output " + std::to_string(k) + " refers to node " + std::to_string(o) + " of " + std::to_string(n));
    g.outputs.push_back(o);
  }
  if (r.left() != 0) r.fail(std::to_string(r.left()) + " unexpected bytes after the graph");
  return g;
}

}  // namespace

Graph deserialize_graph(std::span<const uint8_t> payload, const std::string& what) {
  Reader r(payload, what);
  return read_graph(r);
}

EntryFrame frame_entry(const EntryHeader& h, const std::vector<std::span<const uint8_t>>& payload) {
  size_t payload_size = 0;
  for (const auto& part : payload) payload_size += part.size();
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.pod(kGraphFormatVersion);
  w.str(h.engine_version);
  w.str(h.cpu_isa);
  w.str(h.key);
  // Zero padding so that the payload starts at a multiple of kEntryPayloadAlignment (mapped
  // entries hand out aligned data).
  const size_t at = w.out.size() + sizeof(uint32_t) + sizeof(uint64_t);
  const auto pad = static_cast<uint32_t>((kEntryPayloadAlignment - at % kEntryPayloadAlignment) % kEntryPayloadAlignment);
  w.pod(pad);
  w.out.resize(w.out.size() + pad, 0);
  w.pod(static_cast<uint64_t>(payload_size));
  Hasher sum;
  sum.update(w.out);
  for (const auto& part : payload) sum.update(part);
  return {std::move(w.out), sum.digest()};
}

std::vector<uint8_t> write_entry(const EntryHeader& h, const Graph& g) {
  const std::vector<uint8_t> payload = serialize_graph(g);
  EntryFrame f = frame_entry(h, {payload});
  f.head.insert(f.head.end(), payload.begin(), payload.end());
  const auto* sum = reinterpret_cast<const uint8_t*>(&f.checksum);
  f.head.insert(f.head.end(), sum, sum + sizeof f.checksum);
  return std::move(f.head);
}

size_t unwrap_entry(std::span<const uint8_t> bytes, const EntryHeader& expect, const std::string& what) {
  Reader r(bytes, what);
  if (bytes.empty()) r.fail("empty file");
  const auto magic = r.take(std::min(sizeof kMagic, bytes.size()), "magic");
  if (magic.size() < sizeof kMagic || std::memcmp(magic.data(), kMagic, sizeof kMagic) != 0)
    r.fail_at(0, "not a graph cache entry (bad magic)");
  const auto version = r.pod<uint32_t>("format version");
  if (version != kGraphFormatVersion)
    r.fail_at(8, "format version " + std::to_string(version) + ", this engine reads " +
                     std::to_string(kGraphFormatVersion));
  // The checksum covers the header too: check it before trusting any field.
  if (bytes.size() < r.pos() + sizeof(uint64_t)) r.fail("truncated: no room for the checksum");
  const size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, sizeof stored);
  const uint64_t actual = hash64(bytes.first(body));
  if (stored != actual) r.fail_at(body, "checksum mismatch (truncated or corrupt)");
  Reader h(bytes.first(body), what);
  h.take(r.pos(), "header");
  const size_t engine_at = h.pos();
  if (const std::string v = h.str("engine version"); v != expect.engine_version)
    h.fail_at(engine_at, "written by engine '" + v + "', this is '" + expect.engine_version + "'");
  const size_t isa_at = h.pos();
  if (const std::string v = h.str("CPU ISA"); v != expect.cpu_isa)
    h.fail_at(isa_at, "compiled for CPU '" + v + "', this CPU is '" + expect.cpu_isa + "'");
  const size_t key_at = h.pos();
  if (h.str("key") != expect.key) h.fail_at(key_at, "key differs from the graph looked up (hash collision or stale file)");
  const size_t pad_at = h.pos();
  const auto pad = h.pod<uint32_t>("padding length");
  const size_t want = (kEntryPayloadAlignment - (pad_at + sizeof(uint32_t) + sizeof(uint64_t)) % kEntryPayloadAlignment) %
                      kEntryPayloadAlignment;
  if (pad != want) h.fail_at(pad_at, "padding length " + std::to_string(pad) + ", expected " + std::to_string(want));
  const size_t zeros_at = h.pos();
  for (uint8_t b : h.take(pad, "padding"))
    if (b != 0) h.fail_at(zeros_at, "padding is not zero");
  const size_t len_at = h.pos();
  const auto len = h.pod<uint64_t>("payload length");
  if (len != h.left())
    h.fail_at(len_at, "payload length " + std::to_string(len) + " but " + std::to_string(h.left()) + " bytes follow");
  return h.pos();
}

Graph read_entry(std::span<const uint8_t> bytes, const EntryHeader& expect, const std::string& what) {
  const size_t payload_at = unwrap_entry(bytes, expect, what);
  Reader p(bytes.subspan(payload_at, bytes.size() - sizeof(uint64_t) - payload_at), what, payload_at);
  return read_graph(p);
}

}  // namespace hg::graphs
