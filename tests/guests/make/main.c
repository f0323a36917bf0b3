#include "greet.h"
int main(void) { greet("make"); return 0; }
