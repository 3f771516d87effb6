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
    versions = rctx.execute(args[:1] + ["--modversion"] + args[1:])
    if cflags.return_code != 0 or libs.return_code != 0 or versions.return_code != 0:
        fail("pkg-config could not find %s: %s%s" % (rctx.attr.modules, cflags.stderr, libs.stderr))

    # The modules' versions as a define: headers in /usr/include are not
    # inputs Bazel tracks, so an upgraded package (refetched by `bazel sync
    # --only=NAME`, or in a fresh output base) must change the command line
    # of everything compiled against it.
    stamp = "_".join(_split(versions.stdout.replace("\n", " "))).replace(".", "_").replace("-", "_").replace("~", "_").replace("+", "_")
    defines = ["KVCAST_PKG_%s_VERSIONS=%s" % (rctx.attr.name.upper().replace("-", "_").replace(".", "_"), stamp)]
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
