// Ctrl-C: the first SIGINT asks the runner to stop after the current sample and keep the rows
// measured so far; a second one ends the process at once.
#pragma once

namespace ib {

void install_interrupt_handler();
bool interrupted();
// What a first SIGINT does, asked for from code (stdout closed under the run: EPIPE).
void request_interrupt();
void reset_interrupt();  // for tests

}  // namespace ib
