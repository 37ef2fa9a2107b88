// Lab self-test: a binary that dies of a signal.
#include <csignal>
int main() { std::raise(SIGSEGV); }
