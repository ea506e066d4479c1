// Ctrl-C: the first SIGINT asks the runner to stop after the current sample and keep the rows
// measured so far; a second one ends the process at once.
#pragma once

namespace ib {

void install_interrupt_handler();
bool interrupted();
void reset_interrupt();  // for tests

}  // namespace ib
