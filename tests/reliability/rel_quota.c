#include "rel.h"
int main(int argc, char **argv) { rel_init("rel_quota", argc, argv, 10); rel_skip("not written yet"); }
