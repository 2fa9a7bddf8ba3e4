/* paths: where kimi-chat keeps its own files (the XDG config, data and state directories) and
 * where it finds the files it ships (the demo model, the themes). docs/UI.md "Transcripts and
 * sessions" and "Configuration and conventions". */
#ifndef KIMI_APP_PATHS_H
#define KIMI_APP_PATHS_H

#include "engine/base/error.h"

/* Each returns a malloc'ed path without a trailing slash, or NULL and err: KIMI_ERR_USAGE when
 * neither the XDG variable (set, non-empty and absolute, as the XDG spec asks) nor HOME
 * (non-empty) says where it is, KIMI_ERR_NOMEM when an allocation fails.
 *   config:   $XDG_CONFIG_HOME/kimi-chat  (~/.config/kimi-chat)
 *   data:     $XDG_DATA_HOME/kimi-chat    (~/.local/share/kimi-chat)
 *   state:    $XDG_STATE_HOME/kimi-chat   (~/.local/state/kimi-chat)
 *   sessions: <data>/sessions
 *   history:  <state>/history (a file)
 *   config file: <config>/config (a file) */
char *paths_config_dir(kimi_err *err);
char *paths_config_file(kimi_err *err);
char *paths_data_dir(kimi_err *err);
char *paths_state_dir(kimi_err *err);
char *paths_sessions_dir(kimi_err *err);
char *paths_history_file(kimi_err *err);

/* "~" or "~/..." with $HOME put in its place; any other path copied as it is. NULL and err
 * (KIMI_ERR_USAGE) when the path needs HOME and HOME is unset or empty. */
char *paths_expand_home(const char *path, kimi_err *err);

/* Create dir and its missing parents (new ones with mode 0700; existing ones are left as they
 * are). 0 when dir is a directory afterwards; KIMI_ERR_IO naming the component that failed. */
int paths_mkdir_p(const char *dir, kimi_err *err);

/* The bundled resources, the first directory that exists of:
 *   1. $KIMI_DEMO_DIR / $KIMI_THEMES_DIR (when set and non-empty it must exist: a variable
 *      pointing nowhere is an error, not a reason to look elsewhere);
 *   2. <directory of the running executable>/../share/kimi-chat/{kimi-demo,themes} (installed);
 *   3. <install prefix>/share/kimi-chat/{kimi-demo,themes}, the prefix compiled in;
 *   4. <source tree>/{app/demo/kimi-demo,themes}, compiled in (a build tree run in place).
 * Returns a malloc'ed canonical path (realpath), or NULL and err listing every place looked at
 * (KIMI_ERR_MODEL for the demo model, KIMI_ERR_IO for the themes). */
char *paths_demo_model_dir(kimi_err *err);
char *paths_themes_dir(kimi_err *err);

/* The file of theme NAME (no '/'): $XDG_CONFIG_HOME/kimi-chat/themes/NAME.theme, else the
 * shipped themes/NAME.theme. Returns it malloc'ed, or NULL and err (KIMI_ERR_USAGE: "theme
 * 'neon' not found (themes: default, high-contrast, light, mono)"). */
char *paths_theme_file(const char *name, kimi_err *err);

/* The themes there are, sorted, without duplicates: "default, high-contrast, light, mono"
 * (malloc'ed; "" when none is found; NULL when out of memory). */
char *paths_theme_names(void);

#endif
