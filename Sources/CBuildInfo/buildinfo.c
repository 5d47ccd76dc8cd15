#include "buildinfo.h"

#if !defined(SWITCHYARD_COMMIT) && __has_include(<switchyard_commit.h>)
#include <switchyard_commit.h>
#endif
#ifndef SWITCHYARD_COMMIT
#define SWITCHYARD_COMMIT "unknown"
#endif

const char *switchyard_build_commit(void) { return SWITCHYARD_COMMIT; }
