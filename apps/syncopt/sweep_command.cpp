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
      "key=v1,v2,... (or a range: range(0,3), 0.01:0.05:0.01), each run named by its config's "
      "run.name and the values it sweeps (fmnist-sync_backups=1_lr=0.02), or by run.name "
      "itself where it refers to swept keys (--set 'run.name=ab-b${train.backups}'). Every "
      "combination is checked like `syncopt train` would (78, each problem said once with "
      "the runs it concerns). Prints one `syncopt train` argument line per run (a sweep file: "
      "scripts/sweep.sh runs it here, N at a time; scripts/slurm/sweep.sbatch as an array "
      "job), or writes it to --out.");
  cmd->add_option("config", args.config_path, "TOML experiment file, e.g. configs/fmnist-sync.toml")
      ->required();
  cmd->add_option("-m,--multi", args.axes,
                  "A swept key and its values, section.key=v1,v2 (repeatable: the grid of all; "
                  "commas inside [...] or (...) do not split); a value may be range(a,b[,step]) "
                  "(b excluded) or a:b[:step] (b included)")
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
      "  scripts/sweep.sh sweep.txt -j 2 --np 7            # here, two runs at a time\n"
      "  sbatch --array=0-5 --ntasks=7 scripts/slurm/sweep.sbatch sweep.txt\n"
      "A line of a sweep file may hold -m itself: sweep.sbatch expands it with this command.\n" +
      std::string(kExitCodes));
  return cmd;
}

int run_sweep(const SweepArgs& args) {
  using namespace syncopt;
  std::vector<config::SweepAxis> axes;
  for (const auto& a : args.axes) axes.push_back(config::parse_axis(a));
  config::check_axes(axes);
  const config::Config base = config::load(args.config_path, args.overrides);
  // Every combination is a valid config, or the sweep is refused whole
  // (each problem said once, with the runs it concerns).
  const auto runs =
      config::check_runs(args.config_path, args.overrides, config::expand(axes, base.run.name));
  std::string text;
  for (const auto& r : runs) {
    std::string line = args.config_path;
    // The run's own name comes last; a run.name given here (a template
    // such as ab-b${train.backups}) has made it.
    for (const auto& o : args.overrides)
      if (o.rfind("run.name=", 0) != 0) line += " --set " + o;
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
               "%zu runs written to %s. Run them here, N at a time (K ranks each distributed "
               "run):\n  scripts/sweep.sh %s -j N --np K\nor submit them as an array job:\n"
               "  sbatch --array=0-%zu --ntasks=K scripts/slurm/sweep.sbatch %s\n"
               "(each line is the arguments of `syncopt train`)\n",
               runs.size(), args.out.c_str(), args.out.c_str(), runs.size() - 1, args.out.c_str());
  return 0;
}

}  // namespace syncopt::app
