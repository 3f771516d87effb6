"""A repository rule that wraps a system library found by pkg-config."""

def _split(s):
    return [x for x in s.strip().split(" ") if x]

def _pkg_config_library_impl(rctx):
    pc = rctx.which("pkg-config")
    if pc == None:
        fail("pkg-config is not installed (apt-get install pkg-config)")
    args = [str(pc)] + rctx.attr.modules
    cflags = rctx.execute(args[:1] + ["--cflags"] + args[1:])
    libs = rctx.execute(args[:1] + ["--libs"] + args[1:])
    if cflags.return_code != 0 or libs.return_code != 0:
        fail("pkg-config could not find %s: %s%s" % (rctx.attr.modules, cflags.stderr, libs.stderr))
    defines = []
    includes = []
    for f in _split(cflags.stdout):
        if f.startswith("-I"):
            # Absolute include paths are not allowed in copts of a library
            # that others depend on: link the directory into this repository.
            local = "include_%d" % len(includes)
            rctx.symlink(f[2:].rstrip("/"), local)
            includes.append(local)
        elif f.startswith("-D"):
            defines.append(f[2:])
    linkopts = _split(libs.stdout) + rctx.attr.extra_libs
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "{name}",
    hdrs = glob([i + "/**/*.h" for i in {includes}]),
    includes = {includes},
    defines = {defines},
    linkopts = {linkopts},
)
""".format(
        name = rctx.attr.name,
        includes = repr(includes),
        defines = repr(defines),
        linkopts = repr(linkopts),
    ))

pkg_config_library = repository_rule(
    implementation = _pkg_config_library_impl,
    attrs = {
        "modules": attr.string_list(mandatory = True),
        "extra_libs": attr.string_list(),
    },
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)
