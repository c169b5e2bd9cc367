// Tests of checkpoint::State: every field type round-trips bit for bit, the
// encoding is deterministic and little-endian, and every misuse and every
// kind of damaged input is a typed error that names the field or the file.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/state.hpp"
#include "common/error.hpp"

using namespace syncopt;
using syncopt::checkpoint::State;

namespace {

State sample_state() {
  State s;
  s.put("u", std::uint64_t{0xfedcba9876543210ULL});
  s.put("i", std::int64_t{-42});
  s.put("d", -0.1);
  s.put("name", "rmsprop");
  s.put("empty", std::string());
  s.put("floats", std::vector<float>{1.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::infinity(), 1e-45f});
  s.put("u64s", std::vector<std::uint64_t>{0, 1, ~std::uint64_t{0}});
  s.put("i64s", std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), -1, 7});
  State optim;
  optim.put("mom", std::vector<float>{0.25f, 0.5f});
  State inner;
  inner.put("t", std::uint64_t{3});
  optim.put_child("ema", inner);
  s.put_child("optim", optim);
  return s;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

}  // namespace

TEST_CASE("State: every type round-trips bitwise, in order", "[state]") {
  const State s = sample_state();
  const std::string bytes = s.serialize();
  const State r = State::deserialize(bytes, "mem", "shard0");
  CHECK(r == s);
  CHECK(r.serialize() == bytes);  // deterministic
  CHECK(r.names() == std::vector<std::string>{"u", "i", "d", "name", "empty", "floats", "u64s",
                                              "i64s", "optim"});
  CHECK(r.get<std::uint64_t>("u") == 0xfedcba9876543210ULL);
  CHECK(r.get<std::int64_t>("i") == -42);
  CHECK(r.get<double>("d") == -0.1);
  CHECK(r.get<std::string>("name") == "rmsprop");
  CHECK(r.get<std::string>("empty").empty());
  const auto& f = r.get<std::vector<float>>("floats");
  REQUIRE(f.size() == 5);
  CHECK(std::signbit(f[1]));
  CHECK(std::isnan(f[2]));
  CHECK(f[4] == 1e-45f);  // a denormal survives
  CHECK(r.get<std::vector<std::int64_t>>("i64s")[0] == std::numeric_limits<std::int64_t>::min());
  CHECK(r.child("optim").child("ema").get<std::uint64_t>("t") == 3);
  CHECK(r.child("optim").child("ema").path() == "shard0.optim.ema");
  CHECK(r.child("optim").origin() == "mem");

  // Bitwise equality: -0 and +0 differ, so a restored buffer is really the same.
  State a, b;
  a.put("x", std::vector<float>{0.0f});
  b.put("x", std::vector<float>{-0.0f});
  CHECK_FALSE(a == b);
}

TEST_CASE("State: the encoding is little-endian with a magic and a version", "[state]") {
  State s;
  s.put("n", std::uint64_t{0x0102030405060708ULL});
  const std::string b = s.serialize();
  // magic(8) version(4) count(8) kind(1) name_len(4) name(1) value(8)
  REQUIRE(b.size() == 34);
  CHECK(b.substr(0, 8) == "SYNCSTAT");
  CHECK(b.substr(8, 4) == std::string("\x01\x00\x00\x00", 4));
  CHECK(b[20] == 1);  // kind u64
  CHECK(b.substr(26) == "\x08\x07\x06\x05\x04\x03\x02\x01");
}

TEST_CASE("State: get of a missing field or the wrong type names the field path", "[state]") {
  const State r =
      State::deserialize(sample_state().serialize(), "runs/a/100/shard0.state", "shard0");
  const std::string missing =
      message_of([&] { (void)r.child("optim").get<std::vector<float>>("ms"); });
  CHECK_THAT(missing, Catch::Contains("checkpoint field shard0.optim.ms: missing"));
  CHECK_THAT(missing, Catch::Contains("runs/a/100/shard0.state"));
  const std::string wrong = message_of([&] { (void)r.get<double>("u"); });
  CHECK_THAT(wrong, Catch::Contains("checkpoint field shard0.u: expected a f64, found a u64"));
  CHECK_THAT(message_of([&] { (void)r.child("name"); }),
             Catch::Contains("shard0.name: expected a child state, found a string"));
  CHECK_THAT(message_of([&] { (void)r.get<std::uint64_t>("optim"); }),
             Catch::Contains("found a child state"));
  // Built in memory: the path comes from put_child, whatever the order of puts.
  State leaf;
  State mid;
  mid.put_child("leaf", leaf);
  State root("worker3");
  root.put_child("mid", mid);
  CHECK_THAT(message_of([&] { (void)root.child("mid").child("leaf").get<double>("x"); }),
             Catch::Contains("checkpoint field worker3.mid.leaf.x: missing"));
}

TEST_CASE("State: bad field names and duplicates are bugs", "[state]") {
  State s;
  s.put("a", 1.0);
  CHECK_THROWS_AS(s.put("a", 2.0), InternalError);
  CHECK_THROWS_AS(s.put("", 2.0), InternalError);
  CHECK_THROWS_AS(s.put("a.b", 2.0), InternalError);
  CHECK_THROWS_AS(s.put_child("a", State()), InternalError);
  CHECK(s.size() == 1);
}

TEST_CASE("State: malformed bytes are a DataError naming the origin", "[state]") {
  const std::string good = sample_state().serialize();
  const auto err = [](std::string_view bytes) {
    return message_of([&] { (void)State::deserialize(bytes, "ck/w0.state"); });
  };
  CHECK_THAT(err(""), Catch::Contains("ck/w0.state") && Catch::Contains("wrong magic"));
  CHECK_THAT(err("NOTSTATEAAAAAAAAAAAAAAAA"), Catch::Contains("wrong magic"));
  std::string v2 = good;
  v2[8] = 2;
  CHECK_THAT(err(v2), Catch::Contains("format version 2"));
  // Every truncation is caught, whichever field it cuts.
  for (std::size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n);
    CHECK_THROWS_AS(State::deserialize(std::string_view(good).substr(0, n), "x"), DataError);
  }
  CHECK_THAT(err(good + "z"), Catch::Contains("1 trailing bytes"));
  std::string kind = good;
  kind[20] = 9;  // the first field's kind byte
  CHECK_THAT(err(kind), Catch::Contains("unknown kind 9"));

  // A count that claims more than the file holds fails before allocating.
  State s;
  s.put("v", std::vector<float>{1.0f});
  std::string huge = s.serialize();
  huge.replace(26, 8, std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
  CHECK_THAT(err(huge), Catch::Contains("truncated") && Catch::Contains("field v"));

  // Two fields with one name cannot come out of serialize(): damage.
  State d;
  d.put("a", std::uint64_t{1});
  d.put("b", std::uint64_t{2});
  std::string dup = d.serialize();
  dup[dup.size() - 9] = 'a';  // rename "b" to "a"
  CHECK_THAT(err(dup), Catch::Contains("duplicate field name"));
}
