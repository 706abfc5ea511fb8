/* sluice/version.h: the numbers come from the header CMake writes at configure time
 * (cmake/version_gen.h.in -> BUILD/gen/sluice_version_gen.h). */
#include "sluice/version.h"

#include <stddef.h>

#include "sluice_version_gen.h"

const char *sl_version(void) { return SLUICE_GEN_VERSION; }

void sl_version_numbers(int *major, int *minor, int *patch) {
    if (major) *major = SLUICE_GEN_VERSION_MAJOR;
    if (minor) *minor = SLUICE_GEN_VERSION_MINOR;
    if (patch) *patch = SLUICE_GEN_VERSION_PATCH;
}

const char *sl_version_git(void) { return SLUICE_GEN_GIT; }

const char *sl_version_string(void) {
    return sizeof SLUICE_GEN_GIT > 1 ? SLUICE_GEN_VERSION " (git " SLUICE_GEN_GIT ")" : SLUICE_GEN_VERSION;
}
