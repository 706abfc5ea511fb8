/* Which Sluice this is: the release version (CMake's project(VERSION)) and, for a build made
 * from a git checkout, the commit it was built from. Every sluice-* tool prints them for
 * --version. The values are fixed when the build is configured (`git describe --always
 * --dirty` at cmake time); configure again to refresh the commit after new commits. */
#ifndef SLUICE_VERSION_H
#define SLUICE_VERSION_H

#ifdef __cplusplus
extern "C" {
#endif

/* The release version, "MAJOR.MINOR.PATCH" ("0.1.0"). Never NULL; a static string. */
const char *sl_version(void);

/* The version's numbers (any pointer may be NULL). */
void sl_version_numbers(int *major, int *minor, int *patch);

/* The commit the library was built from, as `git describe --always --dirty` printed it
 * when the build was configured ("705441a", "705441a-dirty"); "" when it was not built from
 * a git checkout or git was missing. Never NULL; a static string. */
const char *sl_version_git(void);

/* "0.1.0 (git 705441a)", or "0.1.0" without a commit. Never NULL; a static string. */
const char *sl_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
