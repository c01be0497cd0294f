//! `init_device_mesh` and `DeviceMesh`: the world's ranks laid out as an n-dimensional
//! array with named dimensions, and a process group along each dimension, as
//! `torch.distributed.device_mesh` lays them out and makes them.
//!
//! The ranks are `arange(n).view(shape)`: the last dimension is the fastest, so on 4
//! ranks a `[2, 2]` mesh named `["dp", "tp"]` has the TP groups {0, 1} and {2, 3} and the
//! DP groups {0, 2} and {1, 3}. Every rank makes the groups of every dimension in
//! PyTorch's order (dimension by dimension, the rows of each in order), members or not,
//! so that Rust and Python ranks of one job make the same groups under the same keys.
use std::sync::Arc;

use tch::Device;

use crate::default_group::{default_group, get_rank};
use crate::error::{DistError, Result};
use crate::group::{Backend, ProcessGroup};
use crate::new_group::new_group_of;

/// A mesh of the world's ranks with named dimensions, and this rank's process group along
/// each: `torch.distributed.device_mesh.DeviceMesh`.
#[derive(Clone)]
pub struct DeviceMesh {
    device: Device,
    /// The size of each dimension.
    shape: Vec<usize>,
    names: Vec<String>,
    /// The global ranks of the mesh, row-major (the last dimension fastest).
    ranks: Vec<usize>,
    /// This rank's group along each dimension.
    groups: Vec<Arc<ProcessGroup>>,
    /// This rank's place in the mesh, a coordinate per dimension.
    coordinate: Vec<usize>,
}

impl std::fmt::Debug for DeviceMesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMesh")
            .field("device", &self.device)
            .field("shape", &self.shape)
            .field("names", &self.names)
            .field("ranks", &self.ranks)
            .field("coordinate", &self.coordinate)
            .finish()
    }
}

/// `init_device_mesh(device_type, mesh_shape, mesh_dim_names)`: every rank of the
/// default group calls it with the same `shape` and `names`; each gets the mesh, its
/// coordinate in it and its group along every dimension. The mesh must hold the whole
/// world (PyTorch lets a mesh be smaller and leaves the other ranks out of it; a job
/// whose ranks are not all in its mesh is refused here instead).
///
/// A dimension that spans the whole world uses the default group itself, as PyTorch
/// does; each other dimension makes one [`new_group`](crate::new_group) per row. (With an NCCL default
/// group bound to a GPU, PyTorch makes a dimension's groups with one `split_group` call;
/// this makes one split per row, so a mixed Rust and Python job on NCCL would number its
/// groups apart. On Gloo, Rust and Python ranks make the same groups.)
///
/// ```no_run
/// use tch_distributed as dist;
///
/// # fn main() -> dist::Result<()> {
/// // 4 ranks: TP inside pairs of neighbours, DP across them.
/// let mesh = dist::init_device_mesh(tch::Device::Cpu, &[2, 2], &["dp", "tp"])?;
/// let tp = mesh.get_group("tp")?; // {0, 1} or {2, 3}
/// let dp_rank = mesh.get_local_rank("dp")?; // which replica this rank is part of
/// # let _ = (tp, dp_rank);
/// # Ok(()) }
/// ```
pub fn init_device_mesh(device: Device, shape: &[usize], names: &[&str]) -> Result<DeviceMesh> {
    let world = default_group()?;
    let world_size = world.world_size();
    check_layout(shape, names, world_size)?;
    let rank = get_rank()?;
    let mut groups = Vec::with_capacity(shape.len());
    for dim in 0..shape.len() {
        let rows = dimension_groups(shape, dim);
        let group = if shape[dim] == world_size && !gloo_world_beside_cuda(world.backend()) {
            // The whole world along this dimension: the default group, no new one;
            // reported once more, under the dimension's name.
            crate::debug::group_created(|| crate::debug::GroupCreation {
                group: world.number(),
                ranks: (0..world_size).collect(),
                rank: Some(world.rank()),
                mesh_dim: Some(names[dim].to_string()),
            });
            world.clone()
        } else {
            let mut mine = None;
            for row in &rows {
                // Every rank makes every row's group, in order; only members get one.
                if let Some(group) = new_group_of(Some(row), None, Some(names[dim]))? {
                    mine = Some(group);
                }
            }
            mine.ok_or_else(|| {
                DistError::invalid(format!(
                    "init_device_mesh: rank {rank} is in none of dimension {dim}'s groups"
                ))
            })?
        };
        groups.push(group);
    }
    Ok(DeviceMesh {
        device,
        shape: shape.to_vec(),
        names: names.iter().map(|n| n.to_string()).collect(),
        ranks: (0..world_size).collect(),
        coordinate: coordinate_of(rank, shape),
        groups,
    })
}

/// PyTorch makes a new group of the whole world instead of using a Gloo default group
/// when CUDA is available (a mesh on the GPUs needs a group that can take CUDA tensors).
fn gloo_world_beside_cuda(backend: Backend) -> bool {
    backend == Backend::Gloo && tch::Cuda::is_available()
}

/// Refuses a shape and names that do not make a mesh of the world.
fn check_layout(shape: &[usize], names: &[&str], world_size: usize) -> Result<()> {
    if shape.is_empty() {
        return Err(DistError::invalid("init_device_mesh: the mesh needs at least one dimension"));
    }
    if names.len() != shape.len() {
        return Err(DistError::invalid(format!(
            "init_device_mesh: {} dimension names for a mesh of {} dimensions ({shape:?}); name each dimension once",
            names.len(),
            shape.len()
        )));
    }
    if let Some(dim) = shape.iter().position(|&s| s == 0) {
        return Err(DistError::invalid(format!(
            "init_device_mesh: dimension {dim} ({}) has size 0",
            names[dim]
        )));
    }
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(DistError::invalid(format!(
                "init_device_mesh: the dimension name \"{name}\" is given twice; each dimension needs its own"
            )));
        }
    }
    let size: usize = shape.iter().product();
    if size != world_size {
        let dims: Vec<String> = shape.iter().zip(names).map(|(s, n)| format!("{n}={s}")).collect();
        return Err(DistError::invalid(format!(
            "init_device_mesh: the mesh {} holds {size} ranks but the world has {world_size}; \
             its sizes must multiply to the world size",
            dims.join(" x ")
        )));
    }
    Ok(())
}

/// The ranks of each group along dimension `dim` of a mesh of `shape` over
/// `arange(n)`, in PyTorch's order: the mesh with `dim` moved last, flattened into rows
/// (`mesh.swapdims(-1, dim).reshape(-1, shape[dim])`).
pub(crate) fn dimension_groups(shape: &[usize], dim: usize) -> Vec<Vec<usize>> {
    let strides = strides(shape);
    let last = shape.len() - 1;
    // After swapdims(-1, dim) the rows run over the first n-1 axes in row-major order:
    // the original ones but the last, with the last axis in `dim`'s place.
    let order: Vec<usize> = (0..last).map(|axis| if axis == dim { last } else { axis }).collect();
    let order_shape: Vec<usize> = order.iter().map(|&axis| shape[axis]).collect();
    let rows: usize = order_shape.iter().product();
    (0..rows)
        .map(|row| {
            let index = unravel(row, &order_shape);
            let base: usize = order.iter().zip(&index).map(|(&axis, &i)| i * strides[axis]).sum();
            (0..shape[dim]).map(|i| base + i * strides[dim]).collect()
        })
        .collect()
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// The multi-index of flat position `flat` in a row-major array of `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    index
}

/// `rank`'s coordinate in a mesh of `shape` over `arange(n)`.
fn coordinate_of(rank: usize, shape: &[usize]) -> Vec<usize> {
    unravel(rank, shape)
}

impl DeviceMesh {
    /// The device type the mesh was made for.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The size of each dimension (`mesh.shape`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions (`mesh.ndim`).
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The dimensions' names (`mesh.mesh_dim_names`).
    pub fn mesh_dim_names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// The global ranks of the mesh, row-major (`mesh.mesh.flatten()`).
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }

    /// The number of ranks in the mesh (`mesh.size()`).
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The position of the dimension called `name`, or an error naming the dimensions.
    pub fn dim(&self, name: &str) -> Result<usize> {
        self.names.iter().position(|n| n == name).ok_or_else(|| {
            DistError::invalid(format!(
                "the mesh has no dimension \"{name}\"; its dimensions are {:?}",
                self.names
            ))
        })
    }

    /// The size of dimension `name` (`mesh.size(mesh_dim)`).
    pub fn dim_size(&self, name: &str) -> Result<usize> {
        Ok(self.shape[self.dim(name)?])
    }

    /// This rank's group along dimension `name` (`mesh.get_group(mesh_dim)`): the ranks
    /// that differ from this one in that coordinate only.
    pub fn get_group(&self, name: &str) -> Result<Arc<ProcessGroup>> {
        Ok(self.groups[self.dim(name)?].clone())
    }

    /// This rank's coordinate along dimension `name`, its rank in that dimension's group
    /// (`mesh.get_local_rank(mesh_dim)`).
    pub fn get_local_rank(&self, name: &str) -> Result<usize> {
        Ok(self.coordinate[self.dim(name)?])
    }

    /// This rank's coordinate in the mesh, one index per dimension
    /// (`mesh.get_coordinate()`).
    pub fn get_coordinate(&self) -> &[usize] {
        &self.coordinate
    }

    /// The 1-D mesh of dimension `name` that holds this rank (`mesh["tp"]`): its ranks
    /// are this rank's group along that dimension.
    pub fn slice(&self, name: &str) -> Result<DeviceMesh> {
        let dim = self.dim(name)?;
        let row = dimension_groups(&self.shape, dim)
            .into_iter()
            .find(|row| row.contains(&self.ranks[self.flat_position()]))
            .expect("every rank of the mesh is in one group of each dimension");
        Ok(DeviceMesh {
            device: self.device,
            shape: vec![self.shape[dim]],
            names: vec![name.to_string()],
            ranks: row.iter().map(|&i| self.ranks[i]).collect(),
            groups: vec![self.groups[dim].clone()],
            coordinate: vec![self.coordinate[dim]],
        })
    }

    /// This rank's position in [`ranks`](Self::ranks).
    fn flat_position(&self) -> usize {
        self.coordinate.iter().zip(strides(&self.shape)).map(|(c, s)| c * s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyTorch's example: on 4 ranks a (dp, tp) = (2, 2) mesh has TP groups {0,1},{2,3}
    /// and DP groups {0,2},{1,3}; on 8 ranks of (2, 2, 2) each dimension's groups are the
    /// mesh with that dimension moved last, flattened (as `swapdims(-1, dim)` orders them).
    #[test]
    fn groups_are_pytorchs_rows_in_pytorchs_order() {
        assert_eq!(dimension_groups(&[2, 2], 1), [[0, 1], [2, 3]]);
        assert_eq!(dimension_groups(&[2, 2], 0), [[0, 2], [1, 3]]);
        assert_eq!(dimension_groups(&[2, 3], 0), [[0, 3], [1, 4], [2, 5]]);
        assert_eq!(dimension_groups(&[2, 3], 1), [[0, 1, 2], [3, 4, 5]]);
        assert_eq!(dimension_groups(&[6], 0), [[0, 1, 2, 3, 4, 5]]);
        // torch.arange(8).view(2,2,2).swapdims(-1, d).reshape(-1, 2), d = 0, 1, 2:
        assert_eq!(dimension_groups(&[2, 2, 2], 0), [[0, 4], [2, 6], [1, 5], [3, 7]]);
        assert_eq!(dimension_groups(&[2, 2, 2], 1), [[0, 2], [1, 3], [4, 6], [5, 7]]);
        assert_eq!(dimension_groups(&[2, 2, 2], 2), [[0, 1], [2, 3], [4, 5], [6, 7]]);
    }

    #[test]
    fn a_ranks_coordinate_is_its_place_in_the_row_major_mesh() {
        assert_eq!(coordinate_of(0, &[2, 2]), [0, 0]);
        assert_eq!(coordinate_of(1, &[2, 2]), [0, 1]);
        assert_eq!(coordinate_of(2, &[2, 2]), [1, 0]);
        assert_eq!(coordinate_of(5, &[2, 3]), [1, 2]);
        // Each rank's groups hold it, at its coordinate along that dimension.
        for shape in [vec![2, 2], vec![2, 3], vec![3, 2], vec![2, 2, 2]] {
            let n: usize = shape.iter().product();
            for rank in 0..n {
                for (dim, &at) in coordinate_of(rank, &shape).iter().enumerate() {
                    let rows: Vec<Vec<usize>> =
                        dimension_groups(&shape, dim).into_iter().filter(|r| r.contains(&rank)).collect();
                    assert_eq!(rows.len(), 1, "{shape:?} dim {dim}: rank {rank} in one group");
                    assert_eq!(rows[0].iter().position(|&r| r == rank), Some(at));
                }
            }
        }
    }

    #[test]
    fn a_layout_that_is_not_a_mesh_of_the_world_is_refused_with_what_to_do() {
        let e = check_layout(&[2, 2], &["dp", "tp"], 6).unwrap_err();
        assert!(e.message().contains("dp=2 x tp=2 holds 4 ranks but the world has 6"), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert!(check_layout(&[2, 3], &["dp"], 6).unwrap_err().message().contains("1 dimension names"));
        assert!(check_layout(&[2, 3], &["tp", "tp"], 6)
            .unwrap_err()
            .message()
            .contains("\"tp\" is given twice"));
        assert!(check_layout(&[0, 3], &["dp", "tp"], 0).unwrap_err().message().contains("size 0"));
        assert!(check_layout(&[], &[], 1).is_err());
        assert!(check_layout(&[3, 2], &["dp", "tp"], 6).is_ok());
    }
}
