// CSVLogger and TensorBoardLogger files, CRC32C, and the Python-compatible formatting they
// rely on (golden values: scripts/golden_loggers.py -> tests/golden/loggers.json).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/atomic_file.h"
#include "tests/errors.h"
#include "tests/golden.h"
#include "tests/tb_event_check.h"
#include "tests/test_env.h"
#include "training/crc32c.h"
#include "training/loggers.h"
#include "training/py_format.h"

namespace hg::training {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string slurp(const fs::path& p) {
  std::vector<uint8_t> b = read_file(p);
  return {b.begin(), b.end()};
}

TEST(Crc32cTest, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = uint8_t(i), down[i] = uint8_t(31 - i);
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  // RFC 3720 B.4: an iSCSI SCSI Read (10) command PDU.
  std::vector<uint8_t> pdu = {0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
                              0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(crc32c(pdu), 0xD9963A56u);
  EXPECT_EQ(crc32c(as_bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c_extend(crc32c(as_bytes("1234")), as_bytes("56789")), 0xE3069283u);
  for (size_t n = 0; n < 9; ++n)  // every split point and tail length of the sliced loop
    EXPECT_EQ(crc32c_extend(crc32c({up.data(), n}), {up.data() + n, up.size() - n}), 0x46DD794Eu) << n;
  EXPECT_EQ(mask_crc32c(0), 0xA282EAD8u);
}

TEST(PyFormatTest, MatchesPython) {
  auto g = test::load_json("loggers.json");
  for (const auto& c : g["repr"]) EXPECT_EQ(py_repr(c[0].get<double>()), c[1].get<std::string>());
  for (const auto& c : g["format"])
    EXPECT_EQ(py_format(c[0].get<double>(), c[2].get<std::string>(), c[1].get<bool>()), c[3].get<std::string>())
        << c.dump();
  EXPECT_THAT(test::error_of<InvalidArgument>([] { py_format(1.5, ".2q"); }), HasSubstr("'.2q'"));
  EXPECT_THAT(test::error_of<InvalidArgument>([] { py_format(1.5, "d"); }), HasSubstr("integer"));
}

TEST(LoggersTest, HparamsYamlMatchesPyYaml) {
  const nlohmann::json golden = test::load_json("loggers.json");  // outlives the loop (a temporary's member would not)
  for (const auto& c : golden["yaml"])
    EXPECT_EQ(hparams_to_yaml(c[0]), c[1].get<std::string>()) << c[0].dump();
}

TEST(LoggersTest, VersionIsNextFreeNumber) {
  fs::path d = test::temp_dir("LoggersVersion");
  EXPECT_EQ(CSVLogger(d).log_dir(), d / "lightning_logs" / "version_0");
  fs::create_directories(d / "lightning_logs" / "version_3");
  fs::create_directories(d / "lightning_logs" / "version_x");
  std::ofstream(d / "lightning_logs" / "version_9");  // a file, not a version directory
  CSVLogger auto_version(d);
  EXPECT_EQ(auto_version.version(), "4");
  EXPECT_EQ(auto_version.log_dir(), d / "lightning_logs" / "version_4");
  fs::create_directories(d / "lightning_logs" / "version_7");
  EXPECT_EQ(auto_version.version(), "4") << "resolved once";
  EXPECT_EQ(TensorBoardLogger(d, "tb", 2).log_dir(), d / "tb" / "version_2");
  EXPECT_EQ(CSVLogger(d, "", "exp-a").log_dir(), d / "exp-a");
  EXPECT_EQ(CSVLogger(d, "", "exp-a").version(), "exp-a");
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { CSVLogger(d, "x", -1); }), HasSubstr("negative"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { CSVLogger(d, "x", "a/b"); }), HasSubstr("'a/b'"));
}

TEST(LoggersTest, CsvMatchesPythonDictWriter) {
  auto g = test::load_json("loggers.json")["csv"];
  fs::path d = test::temp_dir("LoggersCsvGolden");
  CSVLogger log(d, "n", 0);
  for (const auto& row : g["rows"]) {
    std::map<std::string, double> m;
    int64_t step = 0;
    for (const auto& [k, v] : row.items()) {
      if (k == "step") step = v.get<int64_t>();
      else m[k] = v.get<double>();
    }
    log.log_metrics(m, step);
  }
  log.save();
  EXPECT_EQ(slurp(d / "n" / "version_0" / "metrics.csv"), g["text"].get<std::string>());
}

TEST(LoggersTest, CsvHeaderGrowsAndRewritesAtomically) {
  fs::path d = test::temp_dir("LoggersCsvGrow");
  fs::path file = d / "lightning_logs" / "version_0" / "metrics.csv";
  CSVLogger log(d, "lightning_logs", {}, "", 2);
  log.log_metrics({{"loss", 0.5}}, 0);
  EXPECT_FALSE(fs::exists(file)) << "buffered until step 1";
  log.log_metrics({{"loss", 0.25}}, 1);
  EXPECT_EQ(slurp(file), "loss,step\r\n0.5,0\r\n0.25,1\r\n");
  log.log_metrics({{"loss", 0.125}}, 2);
  log.save();  // same header: appended
  EXPECT_EQ(slurp(file), "loss,step\r\n0.5,0\r\n0.25,1\r\n0.125,2\r\n");
  log.log_metrics({{"acc", 0.75}, {"epoch", 0}}, 2);
  log.save();  // new keys: the whole file again with the sorted wider header
  EXPECT_EQ(slurp(file), "acc,epoch,loss,step\r\n,,0.5,0\r\n,,0.25,1\r\n,,0.125,2\r\n0.75,0,,2\r\n");
  for (const auto& e : fs::directory_iterator(file.parent_path()))
    EXPECT_EQ(e.path().filename(), "metrics.csv") << "no temporary file left";
  log.log_hyperparams({{"lr", 0.1}, {"layers", {4, 2}}});
  log.log_hyperparams({{"seed", 7}});
  log.finalize("success");
  EXPECT_EQ(slurp(file.parent_path() / "hparams.yaml"), "layers:\n- 4\n- 2\nlr: 0.1\nseed: 7\n");

  // A second logger on the same version starts a new file (Lightning deletes old logs).
  CSVLogger again(d, "lightning_logs", 0);
  again.log_metrics({{"x", 1}}, 5);
  again.save();
  EXPECT_EQ(slurp(file), "step,x\r\n5,1.0\r\n");
  // A file changed behind the logger's back is an error naming it.
  std::ofstream(file, std::ios::trunc) << "other,header\r\n";
  again.log_metrics({{"y", 2}}, 6);
  EXPECT_THAT(test::error_of<FormatError>([&] { again.save(); }), HasSubstr("metrics.csv: header changed"));
}

TEST(LoggersTest, CsvPrefixAndBadInput) {
  fs::path d = test::temp_dir("LoggersCsvPrefix");
  CSVLogger log(d, "p", 0, "fit");
  log.log_metrics({{"loss", 1.5}}, 3);
  log.save();
  EXPECT_EQ(slurp(d / "p" / "version_0" / "metrics.csv"), "fit-loss,step\r\n1.5,3\r\n");
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { log.log_metrics({{"step", 1}}, 0); }), HasSubstr("'step'"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { log.log_hyperparams(nlohmann::json::array()); }),
              HasSubstr("object"));
  EXPECT_THAT(test::error_of<InvalidArgument>([&] { CSVLogger(d, "p", 0, "", 0); }),
              HasSubstr("flush_logs_every_n_steps"));
}

// A reader of the event file that checks every CRC, as TensorBoard's does.
struct Record {
  size_t offset;
  std::string data;
};

std::vector<Record> read_records(const std::string& bytes) {
  std::vector<Record> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (pos + 12 > bytes.size()) throw FormatError("truncated header at byte " + std::to_string(pos));
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, bytes.data() + pos, 8);
    std::memcpy(&len_crc, bytes.data() + pos + 8, 4);
    if (masked_crc32c(as_bytes(std::string_view(bytes).substr(pos, 8))) != len_crc)
      throw FormatError("length CRC mismatch at byte " + std::to_string(pos));
    if (pos + 12 + len + 4 > bytes.size()) throw FormatError("truncated record at byte " + std::to_string(pos));
    std::string data = bytes.substr(pos + 12, len);
    std::memcpy(&data_crc, bytes.data() + pos + 12 + len, 4);
    if (masked_crc32c(as_bytes(data)) != data_crc) throw FormatError("data CRC mismatch at byte " + std::to_string(pos));
    out.push_back({pos, data});
    pos += 12 + len + 4;
  }
  return out;
}

uint64_t varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < s.size(); shift += 7) {
    uint8_t b = uint8_t(s[i++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  throw FormatError("truncated varint");
}

// (field, wire type, payload: the varint as 8 bytes, or the fixed / length-delimited bytes)
std::vector<std::tuple<int, int, std::string>> fields(const std::string& msg) {
  std::vector<std::tuple<int, int, std::string>> out;
  for (size_t i = 0; i < msg.size();) {
    uint64_t key = varint(msg, i);
    int wire = int(key & 7);
    std::string v;
    if (wire == 0) {
      uint64_t x = varint(msg, i);
      v.assign(reinterpret_cast<char*>(&x), 8);
    } else {
      size_t n = wire == 1 ? 8 : wire == 5 ? 4 : wire == 2 ? size_t(varint(msg, i)) : throw FormatError("wire type");
      if (i + n > msg.size()) throw FormatError("field past the end");
      v = msg.substr(i, n), i += n;
    }
    out.emplace_back(int(key >> 3), wire, v);
  }
  return out;
}

struct Scalar {
  std::string tag;
  int64_t step;
  float value;
};

TEST(LoggersTest, TensorBoardEventFileRecordByRecord) {
  fs::path d = test::temp_dir("LoggersTb");
  TensorBoardLogger tb(d, "tb", 1);
  EXPECT_TRUE(tb.event_file().empty());
  tb.log_hyperparams({{"lr", 0.01}, {"arch", "mlp"}});
  tb.log_metrics({{"train_loss", 0.75}, {"lr-SGD", 0.1}}, 0);
  tb.log_metrics({{"train_loss", 0.5}}, 50);
  tb.log_metrics({{"val_loss", 1.0 / 3}}, 1ll << 40);
  tb.finalize("success");

  fs::path file = tb.event_file();
  EXPECT_EQ(file.parent_path(), d / "tb" / "version_1");
  std::string name = file.filename().string();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_THAT(name, ::testing::MatchesRegex("events\\.out\\.tfevents\\.[0-9]{10}\\..*\\.[0-9]+\\.[0-9]+"));
  EXPECT_THAT(name, HasSubstr("." + std::string(host) + "." + std::to_string(getpid()) + "."));
  EXPECT_EQ(slurp(d / "tb" / "version_1" / "hparams.yaml"), "arch: mlp\nlr: 0.01\n");

  std::string bytes = slurp(file);
  auto records = read_records(bytes);
  ASSERT_EQ(records.size(), 6u);  // file_version, hparams text, 4 scalars
  auto first = fields(records[0].data);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(std::get<0>(first[0]), 1);  // wall_time, a double of about now
  double wall;
  std::memcpy(&wall, std::get<2>(first[0]).data(), 8);
  EXPECT_GT(wall, 1.6e9);
  EXPECT_EQ(std::get<0>(first[1]), 3);
  EXPECT_EQ(std::get<2>(first[1]), "brain.Event:2");

  std::vector<Scalar> scalars;
  for (size_t r = 2; r < records.size(); ++r) {
    int64_t step = 0;
    for (auto& [f, w, v] : fields(records[r].data)) {
      if (f == 2) std::memcpy(&step, v.data(), 8);
      if (f != 5) continue;
      auto [vf, vw, value] = fields(v).at(0);
      EXPECT_EQ(vf, 1);
      auto parts = fields(value);
      ASSERT_EQ(parts.size(), 2u);
      EXPECT_EQ(std::get<1>(parts[1]), 5);  // simple_value: a float
      float x;
      std::memcpy(&x, std::get<2>(parts[1]).data(), 4);
      scalars.push_back({std::get<2>(parts[0]), step, x});
    }
  }
  ASSERT_EQ(scalars.size(), 4u);
  EXPECT_EQ(scalars[0].tag, "lr-SGD");
  EXPECT_EQ(scalars[0].value, 0.1f);
  EXPECT_EQ(scalars[1].tag, "train_loss");
  EXPECT_EQ(scalars[2].step, 50);
  EXPECT_EQ(scalars[2].value, 0.5f);
  EXPECT_EQ(scalars[3].tag, "val_loss");
  EXPECT_EQ(scalars[3].step, 1ll << 40);
  EXPECT_EQ(scalars[3].value, float(1.0 / 3));

  // The independent Python reader agrees.
  nlohmann::json expected = {
      {"file_version", "brain.Event:2"},
      {"scalars", {{"lr-SGD", 0, 0.1}, {"train_loss", 0, 0.75}, {"train_loss", 50, 0.5}, {"val_loss", 1ll << 40, 1.0 / 3}}},
      {"texts", {{"hparams", 0, "```\narch: mlp\nlr: 0.01\n```"}}},
      {"wall_times_increasing", true}};
  auto [rc, got] = test::tb_event_check(file, expected);
  EXPECT_EQ(rc, 0) << got;

  // One flipped byte anywhere is caught by both readers.
  for (size_t at : {size_t(3), records[3].offset + 15, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] ^= 0x20;
    EXPECT_THROW(read_records(bad), FormatError) << at;
    fs::path badfile = d / "tb" / "version_1" / "bad";
    write_file_atomic(badfile, {as_bytes(bad)});
    auto [bad_rc, msg] = test::tb_event_check(badfile, expected);
    EXPECT_EQ(bad_rc, 2) << "byte " << at << ": " << msg;
    EXPECT_THAT(msg, HasSubstr("CRC mismatch")) << at;
  }
}

TEST(LoggersTest, TensorBoardFilesPerLoggerAndPrefix) {
  fs::path d = test::temp_dir("LoggersTbTwo");
  TensorBoardLogger a(d, "", 0, "test"), b(d, "", 0);
  a.log_metrics({{"acc", 1}}, 1);
  b.log_metrics({{"acc", 2}}, 2);
  a.save();
  b.save();
  EXPECT_NE(a.event_file(), b.event_file()) << "a per-process counter tells them apart";
  EXPECT_EQ(test::tb_event_check(a.event_file(), {{"scalars", {{"test-acc", 1, 1.0}}}}).first, 0);
  EXPECT_EQ(test::tb_event_check(b.event_file(), {{"scalars", {{"acc", 2, 2.0}}}}).first, 0);
  EXPECT_EQ(test::tb_event_check(b.event_file(), {{"scalars", {{"acc", 2, 3.0}}}}).first, 1) << "a wrong expectation fails";
}

}  // namespace
}  // namespace hg::training
