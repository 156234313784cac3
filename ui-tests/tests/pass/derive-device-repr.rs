//! `#[derive(DeviceRepr)]` structs are element types of device memory (`DeviceBuffer`,
//! `DeviceVec`, copies) and scalar kernel arguments; generic structs of one field type,
//! `#[repr(transparent)]` wrappers, nested and explicitly padded structs derive too.
use stream_core::{kernel, scope, Device, DeviceRepr, DeviceVec, Error, LaunchConfig, Stream};

#[derive(Clone, Copy, Debug, PartialEq, DeviceRepr)]
#[repr(C)]
struct Particle {
    position: [f32; 3],
    mass: f32,
}

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Vec3<T: DeviceRepr> {
    x: T,
    y: T,
    z: T,
}

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Grid<const N: usize> {
    rows: [f32; N],
    cols: [f32; N],
}

#[derive(Clone, Copy, DeviceRepr)]
#[repr(transparent)]
struct Meters(f64);

#[derive(Clone, Copy, DeviceRepr)]
#[repr(transparent)]
struct Wrapped<T: DeviceRepr>(T);

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Tagged {
    value: u32,
    tag: u8,
    _pad: [u8; 3],
}

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Nested {
    particle: Particle,
    velocity: Vec3<f32>,
    id: u32,
}

#[derive(Clone, Copy, DeviceRepr)]
#[device_repr(crate = stream_core)]
#[repr(C)]
struct ViaCratePath {
    value: u64,
}

const SRC: &str = r#"
struct Particle { float position[3]; float mass; };
extern "C" __global__ void push(Particle force, float dt, Particle* xs, size_t xs_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < xs_len) for (int k = 0; k < 3; ++k) xs[i].position[k] += dt * force.position[k] / xs[i].mass;
}
"#;

#[kernel(cuda = SRC)]
/// Moves every particle by `dt * force / mass`.
unsafe fn push(force: Particle, dt: f32, xs: &mut [Particle]);

fn takes<T: DeviceRepr>() {}

fn use_them(stream: &Stream, dev: &Device) -> Result<(), Error> {
    let start = [Particle {
        position: [0.0; 3],
        mass: 2.0,
    }; 64];
    let mut vec: DeviceVec<Particle> = dev.upload_vec(&start)?;
    let mut out = [Particle {
        position: [0.0; 3],
        mass: 0.0,
    }; 64];
    scope(stream, |s| {
        let mut xs = s.attach(&mut vec)?;
        let force = Particle {
            position: [1.0, 2.0, 3.0],
            mass: 0.0,
        };
        push(s, LaunchConfig::for_elements(64, 64), force, 0.5, &mut xs)?;
        s.copy_to_host(&xs, &mut out)?.wait()?;
        let mut grid = s.alloc_zeroed::<Grid<8>>(4)?;
        s.fill(&mut grid, Grid { rows: [1.0; 8], cols: [2.0; 8] })?;
        let _nested = s.alloc::<Nested>(16)?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    takes::<Particle>();
    takes::<Vec3<u16>>();
    takes::<Grid<3>>();
    takes::<Meters>();
    takes::<Wrapped<Vec3<i64>>>();
    takes::<Tagged>();
    takes::<Nested>();
    takes::<ViaCratePath>();
    let _ = use_them as fn(&Stream, &Device) -> Result<(), Error>;
}
