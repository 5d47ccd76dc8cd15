#ifndef SWITCHYARD_BUILDINFO_H
#define SWITCHYARD_BUILDINFO_H

/*
 * The commit the binary was built from, for `switchyard --version`: "unknown" for a plain `swift build`.
 * `make release` writes it into switchyard_commit.h in a folder of its own under .build and puts that
 * folder on the C include path (-Xcc -I…), so that only buildinfo.c is compiled again when the commit
 * changes; -Xcc -DSWITCHYARD_COMMIT='"…"' works too, but changes every compile command of the build.
 */
const char *switchyard_build_commit(void);

#endif
