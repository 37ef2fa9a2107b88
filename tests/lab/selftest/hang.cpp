// Lab self-test: a binary that never ends.
#include <unistd.h>
int main() { for (;;) pause(); }
