// The enum-like config keys as enums, each with the one table of its names.
// The key table (config/keys.cpp) parses a name into the enum once, when the
// file or a --set is read; everything after switches on the enum and never
// compares a name. A new value is one line here (and its `case`s, which the
// compiler points out with -Wswitch).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nn/model.hpp"

namespace syncopt::config {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

// Specialised for every config enum below (and Mode, in mode.hpp) with
// `static constexpr std::array<EnumName<E>, n> kNames`, in the order that
// --help and error messages list them.
template <class E>
struct EnumTable;

template <class E>
concept ConfigEnum = requires {
  EnumTable<E>::kNames;
};

// The name of `value` as written in a config file.
template <ConfigEnum E>
constexpr std::string_view enum_name(E value) {
  for (const auto& e : EnumTable<E>::kNames) {
    if (e.value == value) return e.name;
  }
  return "?";
}

template <ConfigEnum E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& e : EnumTable<E>::kNames) {
    if (e.name == name) return e.value;
  }
  return std::nullopt;
}

template <ConfigEnum E>
std::vector<std::string_view> enum_names() {
  std::vector<std::string_view> out;
  for (const auto& e : EnumTable<E>::kNames) out.push_back(e.name);
  return out;
}

// run.progress: where rank 0's progress goes (metrics::Progress).
enum class ProgressOutput { kAuto, kLive, kLines };
// data.name
enum class DataSet { kFashionMnist, kIdx, kCifar10, kNpy, kHdf5, kSynthetic };
// model.name (custom: model.layers)
// model.name: the model table is nn's (nn/model.hpp).
using ModelName = nn::Builtin;
// optim.name
enum class OptimizerName { kSgd, kRmsprop };
// optim.schedule: a shape, with or without a linear warm-up.
enum class Schedule {
  kConstant,
  kExponential,
  kLinearAnneal,
  kWarmupConstant,
  kWarmupLinearAnneal,
  kWarmupExponential
};
// train.clock
enum class Clock { kWall, kVirtual };
// train.staleness_dist (exponential is another name for geometric)
enum class StalenessDist { kFixed, kUniform, kGeometric, kExponential };
// stragglers.model
enum class StragglerModel { kNone, kBernoulli, kExponential, kLognormal, kPareto, kFixed, kTrace };
// stragglers.phase: what a straggler is slow at
enum class StragglerPhase { kCompute, kData };
// compute.backend
enum class Backend { kCpu, kCuda };
// compute.precision (the backends' own enum)
using Precision = nn::Precision;
// sim.compute_dist
enum class ComputeDist { kLognormal, kGamma };
// sim.records
enum class SimRecords { kShard0, kAll, kNone };
// sim.link_sharing
enum class LinkSharing { kSerial, kFair };

// clang-format off
template <> struct EnumTable<ProgressOutput> {
  static constexpr std::array<EnumName<ProgressOutput>, 3> kNames{{
      {ProgressOutput::kAuto, "auto"}, {ProgressOutput::kLive, "live"},
      {ProgressOutput::kLines, "lines"}}};
};
template <> struct EnumTable<DataSet> {
  static constexpr std::array<EnumName<DataSet>, 6> kNames{{
      {DataSet::kFashionMnist, "fashion-mnist"}, {DataSet::kIdx, "idx"},
      {DataSet::kCifar10, "cifar10"}, {DataSet::kNpy, "npy"}, {DataSet::kHdf5, "hdf5"},
      {DataSet::kSynthetic, "synthetic"}}};
};
template <> struct EnumTable<ModelName> {
  static constexpr auto kNames = [] {
    std::array<EnumName<ModelName>, nn::kBuiltinNames.size()> out{};
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = {nn::kBuiltinNames[i].first, nn::kBuiltinNames[i].second};
    }
    return out;
  }();
};
template <> struct EnumTable<OptimizerName> {
  static constexpr std::array<EnumName<OptimizerName>, 2> kNames{{
      {OptimizerName::kSgd, "sgd"}, {OptimizerName::kRmsprop, "rmsprop"}}};
};
template <> struct EnumTable<Schedule> {
  static constexpr std::array<EnumName<Schedule>, 6> kNames{{
      {Schedule::kConstant, "constant"}, {Schedule::kExponential, "exponential"},
      {Schedule::kLinearAnneal, "linear_anneal"}, {Schedule::kWarmupConstant, "warmup_constant"},
      {Schedule::kWarmupLinearAnneal, "warmup_linear_anneal"},
      {Schedule::kWarmupExponential, "warmup_exponential"}}};
};
template <> struct EnumTable<Clock> {
  static constexpr std::array<EnumName<Clock>, 2> kNames{{
      {Clock::kWall, "wall"}, {Clock::kVirtual, "virtual"}}};
};
template <> struct EnumTable<StalenessDist> {
  static constexpr std::array<EnumName<StalenessDist>, 4> kNames{{
      {StalenessDist::kFixed, "fixed"}, {StalenessDist::kUniform, "uniform"},
      {StalenessDist::kGeometric, "geometric"}, {StalenessDist::kExponential, "exponential"}}};
};
template <> struct EnumTable<StragglerModel> {
  static constexpr std::array<EnumName<StragglerModel>, 7> kNames{{
      {StragglerModel::kNone, "none"}, {StragglerModel::kBernoulli, "bernoulli"},
      {StragglerModel::kExponential, "exponential"}, {StragglerModel::kLognormal, "lognormal"},
      {StragglerModel::kPareto, "pareto"}, {StragglerModel::kFixed, "fixed"},
      {StragglerModel::kTrace, "trace"}}};
};
template <> struct EnumTable<StragglerPhase> {
  static constexpr std::array<EnumName<StragglerPhase>, 2> kNames{{
      {StragglerPhase::kCompute, "compute"}, {StragglerPhase::kData, "data"}}};
};
template <> struct EnumTable<Precision> {
  static constexpr std::array<EnumName<Precision>, 2> kNames{{
      {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}}};
};
template <> struct EnumTable<Backend> {
  static constexpr std::array<EnumName<Backend>, 2> kNames{{
      {Backend::kCpu, "cpu"}, {Backend::kCuda, "cuda"}}};
};
template <> struct EnumTable<ComputeDist> {
  static constexpr std::array<EnumName<ComputeDist>, 2> kNames{{
      {ComputeDist::kLognormal, "lognormal"}, {ComputeDist::kGamma, "gamma"}}};
};
template <> struct EnumTable<SimRecords> {
  static constexpr std::array<EnumName<SimRecords>, 3> kNames{{
      {SimRecords::kShard0, "shard0"}, {SimRecords::kAll, "all"}, {SimRecords::kNone, "none"}}};
};
template <> struct EnumTable<LinkSharing> {
  static constexpr std::array<EnumName<LinkSharing>, 2> kNames{{
      {LinkSharing::kSerial, "serial"}, {LinkSharing::kFair, "fair"}}};
};
// clang-format on

// A name for messages and records: std::string(enum_name(v)).
template <ConfigEnum E>
std::string to_string(E value) {
  return std::string(enum_name(value));
}

}  // namespace syncopt::config
