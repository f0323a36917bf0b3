#include <stdio.h>
#include "greet.h"
void greet(const char *who) { printf("hello from %s\n", who); }
