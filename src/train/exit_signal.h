// --exit-signal-handler (Megatron's): SIGTERM, which cluster schedulers send some time before they kill a job, ends
// training after the iteration in progress, with a checkpoint saved (with --save) and exit status 0. The handler only
// notes the signal; the trainer reads the note between iterations, and in a multi-process run the ranks agree on it
// (one of them signalled stops all), so they save and stop at the same iteration.
#pragma once

namespace hytra {

class ExitSignal {
 public:
  // `install`: catch SIGTERM from now until destruction (the previous disposition then comes back); otherwise inert.
  explicit ExitSignal(bool install);
  ~ExitSignal();
  ExitSignal(const ExitSignal&) = delete;
  ExitSignal& operator=(const ExitSignal&) = delete;

  bool received() const;  // SIGTERM arrived since construction

 private:
  bool installed_ = false;
};

}  // namespace hytra
