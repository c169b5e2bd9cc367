// `syncopt sweep CONFIG -m key=v1,v2 ...`: a grid of runs as a sweep file
// (see commands.hpp, config/sweep.hpp).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "config/sweep.hpp"

namespace syncopt::app {

CLI::App* add_sweep_command(CLI::App& app, SweepArgs& args) {
  auto* cmd = app.add_subcommand(
      "sweep",
      "Expand a grid of runs, as Hydra's -m does: every combination of the values of each -m "
      "key=v1,v2,..., each run named by its config's run.name and the values it sweeps "
      "(fmnist-sync_backups=1_lr=0.02). Every combination is checked like `syncopt train` "
      "would (78, naming it, if one is not a valid config). Prints one `syncopt train` "
      "argument line per run (a sweep file: scripts/slurm/sweep.sbatch runs line i as array "
      "task i), or writes it to --out with the sbatch line to submit it.");
  cmd->add_option("config", args.config_path, "TOML experiment file, e.g. configs/fmnist-sync.toml")
      ->required();
  cmd->add_option("-m,--multi", args.axes,
                  "A swept key and its values, section.key=v1,v2 (repeatable: the grid of all; "
                  "commas inside [...] do not split)")
      ->type_name("KEY=V1,V2")
      ->allow_extra_args(false)
      ->required();
  add_set_option(cmd, args.overrides,
                 "Override a key in every run, section.key=value (repeatable)");
  cmd->add_option("--out", args.out, "Write the sweep file here instead of printing it");
  cmd->footer(
      "Examples:\n"
      "  syncopt sweep configs/fmnist-sync.toml -m train.backups=0,1,2 -m optim.lr=0.01,0.02 "
      "--out sweep.txt\n"
      "  sbatch --array=0-5 --ntasks=7 scripts/slurm/sweep.sbatch sweep.txt\n"
      "A line of a sweep file may hold -m itself: sweep.sbatch expands it with this command.\n" +
      std::string(kExitCodes));
  return cmd;
}

int run_sweep(const SweepArgs& args) {
  using namespace syncopt;
  std::vector<config::SweepAxis> axes;
  for (const auto& a : args.axes) axes.push_back(config::parse_axis(a));
  const config::Config base = config::load(args.config_path, args.overrides);
  const auto runs = config::expand(axes, base.run.name);
  // Every combination is a valid config, or the sweep is refused whole.
  std::string problems;
  for (const auto& r : runs) {
    auto overrides = args.overrides;
    overrides.insert(overrides.end(), r.overrides.begin(), r.overrides.end());
    overrides.push_back("run.name=" + r.name);
    try {
      (void)config::load(args.config_path, overrides);
    } catch (const ConfigError& e) {
      problems += "\n  " + r.name + ": " + e.what();
    }
  }
  if (!problems.empty()) {
    throw ConfigError("the sweep has runs that are not valid configs:" + problems);
  }
  std::string text;
  for (const auto& r : runs) {
    std::string line = args.config_path;
    for (const auto& o : args.overrides) line += " --set " + o;
    for (const auto& o : r.overrides) line += " --set " + o;
    text += line + " --set run.name=" + r.name + "\n";
  }
  if (args.out.empty()) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  std::string cmd = "syncopt sweep " + args.config_path;
  for (const auto& a : args.axes) cmd += " -m " + a;
  for (const auto& o : args.overrides) cmd += " --set " + o;
  std::ofstream out(args.out);
  out << "# " << runs.size() << " runs: " << cmd << "\n# sbatch --array=0-" << runs.size() - 1
      << " --ntasks=K scripts/slurm/sweep.sbatch " << args.out << "\n"
      << text;
  out.close();
  if (!out) {
    throw OutputError(ExitCode::kCantCreate, "cannot write the sweep file '" + args.out +
                                                 "'; check the folder exists and is writable");
  }
  std::fprintf(stderr,
               "%zu runs written to %s. Submit them as an array job (K ranks each):\n"
               "  sbatch --array=0-%zu --ntasks=K scripts/slurm/sweep.sbatch %s\n"
               "(scripts/slurm/sweep.sbatch %s lists them; each line is the arguments of "
               "`syncopt train`)\n",
               runs.size(), args.out.c_str(), runs.size() - 1, args.out.c_str(), args.out.c_str());
  return 0;
}

}  // namespace syncopt::app
