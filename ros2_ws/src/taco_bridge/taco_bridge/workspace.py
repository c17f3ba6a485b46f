"""taco-bridge-build: colcon build of the ros2_ws workspace with the PyPI wheels of ROS 2.

    pip install -e ".[ros]"                  # from the taco_ref repository root
    taco-bridge-build                        # builds ros2_ws/src into ros2_ws/build, ros2_ws/install
    source ros2_ws/install/setup.bash        # taco_bridge_msgs (the action's interface) importable

With a ROS 2 installation (its setup.bash sourced) a plain `colcon build` in ros2_ws does the
same; this command is for a Python environment whose ROS 2 comes from the PyPI wheels (rclpy,
the message packages, ament_cmake and the rosidl generators), where two things differ:

1. The wheels install their CMake packages and their ament index into the environment's prefix
   (sys.prefix), which no setup script puts on CMAKE_PREFIX_PATH / AMENT_PREFIX_PATH: this
   command adds it.
2. Some message wheels' CMake export files name the include directories of the machine that
   built them (a manylinux image's /opt/python/cp3XX-cp3XX/include/python3.X and its NumPy's
   include), which do not exist here; CMake then refuses to generate ("Imported target ...
   includes non-existent path"). Rather than edit installed files, the build injects a CMake
   script (CMAKE_PROJECT_INCLUDE) that, once every find_package has run, rewrites such missing
   directories of imported targets to this interpreter's Python and NumPy include directories
   (and drops any other missing one).

The tests build the workspace with `build()` (tests/test_ros_bridge.py).
"""
import argparse
import os
import shutil
import subprocess
import sys
import sysconfig

FIX_INCLUDES = r'''# Written by taco_bridge.workspace: rewrite include directories of imported targets that
# name a path missing on this machine (the build host's, in some ROS 2 wheels' CMake export
# files).
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _taco_fix_imported_includes)
function(_taco_fix_imported_includes)
  get_property(targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY IMPORTED_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
    if(NOT dirs)
      continue()
    endif()
    set(fixed "")
    set(changed FALSE)
    foreach(dir IN LISTS dirs)
      if(dir MATCHES "^\\$<" OR EXISTS "${dir}")
        list(APPEND fixed "${dir}")
      elseif(dir MATCHES "/include/python3\\.[0-9]+$")
        list(APPEND fixed "${TACO_PYTHON_INCLUDE}")
        set(changed TRUE)
      elseif(dir MATCHES "/numpy/(_core|core)/include$")
        list(APPEND fixed "${TACO_NUMPY_INCLUDE}")
        set(changed TRUE)
      else()
        set(changed TRUE)
      endif()
    endforeach()
    if(changed)
      list(REMOVE_DUPLICATES fixed)
      set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${fixed}")
    endif()
  endforeach()
endfunction()
'''


def default_workspace():
    """ros2_ws of the taco_ref checkout this module runs from (an editable install), or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    ws = os.path.dirname(os.path.dirname(os.path.dirname(here)))         # ros2_ws/src/taco_bridge/..
    return ws if os.path.isdir(os.path.join(ws, 'src', 'taco_bridge_msgs')) else None


def wheel_prefix():
    """sys.prefix when the ROS 2 wheels installed their ament index there, else None."""
    index = os.path.join(sys.prefix, 'share', 'ament_index', 'resource_index', 'packages')
    return sys.prefix if os.path.isdir(index) else None


def environment(env=None):
    """The environment for colcon: the wheels' prefix on AMENT_PREFIX_PATH and CMAKE_PREFIX_PATH."""
    env = dict(os.environ if env is None else env)
    prefix = wheel_prefix()
    if prefix is not None:
        for var in ('AMENT_PREFIX_PATH', 'CMAKE_PREFIX_PATH'):
            parts = [p for p in env.get(var, '').split(os.pathsep) if p]
            if prefix not in parts:
                env[var] = os.pathsep.join(parts + [prefix])
    return env


def colcon_command(workspace, base, fix_file):
    """The colcon build command line (a list) for workspace's src into base's build/install/log."""
    import numpy
    colcon = os.path.join(os.path.dirname(sys.executable), 'colcon')
    if not os.path.exists(colcon):
        raise FileNotFoundError(f'colcon not installed next to {sys.executable}: '
                                'pip install -e ".[ros]"')
    return [colcon, '--log-base', os.path.join(base, 'log'), 'build',
            '--base-paths', os.path.join(workspace, 'src'),
            '--build-base', os.path.join(base, 'build'), '--install-base', os.path.join(base, 'install'),
            '--cmake-args', f'-DCMAKE_PROJECT_INCLUDE={fix_file}',
            f'-DPython3_EXECUTABLE={sys.executable}',
            f'-DTACO_PYTHON_INCLUDE={sysconfig.get_paths()["include"]}',
            f'-DTACO_NUMPY_INCLUDE={numpy.get_include()}']


PREREQUISITES = ('CMake, a C and a C++ compiler and the Python headers (Debian: '
                 'sudo apt-get install cmake g++ python3-dev)')
"""What colcon needs beyond the [ros] extra to build the interface package (its C type support)."""


def missing_prerequisites(which=shutil.which, include=None):
    """The build prerequisites this machine lacks, as names (empty: all there)."""
    include = sysconfig.get_paths()['include'] if include is None else include
    missing = [tool for tool, names in (('cmake', ('cmake',)), ('a C compiler', ('cc', 'gcc', 'clang')),
                                        ('a C++ compiler', ('c++', 'g++', 'clang++')))
               if not any(which(n) for n in names)]
    if not os.path.exists(os.path.join(include, 'Python.h')):
        missing.append(f'the Python headers (no Python.h in {include})')
    return missing


def build(workspace=None, base=None, timeout=900, quiet=True):
    """colcon build of workspace/src into base (default: the workspace itself); returns the
    install directory. RuntimeError with colcon's output's tail when the build fails."""
    workspace = workspace or default_workspace()
    if workspace is None:
        raise FileNotFoundError('no ros2_ws found next to this module: give the workspace')
    missing = missing_prerequisites()
    if missing:
        raise FileNotFoundError(f'cannot build the interface package without {", ".join(missing)}; '
                                f'it needs {PREREQUISITES}')
    base = os.path.abspath(base or workspace)
    os.makedirs(os.path.join(base, 'build'), exist_ok=True)
    fix_file = os.path.join(base, 'build', 'taco_fix_imported_includes.cmake')
    with open(fix_file, 'w') as f:
        f.write(FIX_INCLUDES)
    out = subprocess.run(colcon_command(os.path.abspath(workspace), base, fix_file), cwd=base,
                         env=environment(), capture_output=quiet, text=True, timeout=timeout)
    if out.returncode != 0:
        tail = '' if not quiet else f'\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}'
        raise RuntimeError(f'colcon build failed (exit code {out.returncode}){tail}')
    return os.path.join(base, 'install')


def main(argv=None):
    ap = argparse.ArgumentParser(prog='taco-bridge-build', description=__doc__.split('\n')[0])
    ap.add_argument('--workspace', default=None,
                    help='the ros2_ws folder (default: the one of this taco_ref checkout)')
    ap.add_argument('--base', default=None,
                    help='where build/, install/ and log/ go (default: the workspace)')
    args = ap.parse_args(argv)
    try:
        install = build(args.workspace, args.base, quiet=False)
    except (FileNotFoundError, RuntimeError) as err:
        print(f'taco-bridge-build: {err}', file=sys.stderr)
        return 1
    print(f'built: source {os.path.join(install, "setup.bash")}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
