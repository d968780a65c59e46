"""Images already in memory -> `MedicalImage`, read as the file readers read the files they come from.

A `pydicom.Dataset` (what `pydicom.dcmread` returns) goes through the DICOM file reader's `get_data`,
the Datasets of one series through the series reader's; a nibabel image (`nibabel.load`, or what a
`datasets.Nifti` column decodes to) through the NIfTI reader's, after the header checks of the file
behind it (or, for an image built in memory, of its own header); a MONAI `MetaTensor` (what
`monai.transforms.LoadImage` returns) becomes a nibabel image of its array and RAS affine first. So
an object and the file it was read from give the same image. MONAI is never imported here: a
`MetaTensor` can exist only once MONAI is.

Errors are the readers' typed errors, named after the object's file when it has one, else
`<pydicom.Dataset>`, `<nibabel.Nifti1Image>`, `<monai.MetaTensor>`: never after its contents."""

from __future__ import annotations

import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pydicom
from nibabel.spatialimages import SpatialImage

from ...errors import SeriesError, UnsupportedImageError
from ..geometry import LPS_TO_RAS, MedicalImage
from .base import ReaderOptions, _typed_errors
from .dicom import DicomFile, DicomFileReader
from .dicom_dataset import _attribute
from .dicom_series import DicomSeries, DicomSeriesReader
from .nifti import NIFTI_SUFFIXES, NiftiFile, NiftiReader, _check_voxel_layout

# or a MONAI MetaTensor (a torch.Tensor)
InMemoryImage = pydicom.Dataset | list[pydicom.Dataset] | SpatialImage


def _is_meta_tensor(image: object) -> bool:
    module = sys.modules.get("monai.data.meta_tensor")
    return module is not None and isinstance(image, module.MetaTensor)


def _kind(image: object) -> str | None:
    if isinstance(image, pydicom.Dataset):
        return "dicom"
    if isinstance(image, SpatialImage):
        return "nibabel"
    if _is_meta_tensor(image):
        return "monai"
    if isinstance(image, (list, tuple)) and image and all(isinstance(item, pydicom.Dataset) for item in image):
        return "dicom series"
    return None


def is_in_memory_image(image: object) -> bool:
    """Whether `read_in_memory` takes `image`: a pydicom Dataset (or a list of those of one series), a
    nibabel image, or a MONAI MetaTensor."""
    return _kind(image) is not None


def read_in_memory(image: InMemoryImage, options: ReaderOptions | None = None) -> MedicalImage:
    """An image already in memory, read as its file would be: a pydicom Dataset, a list of the Datasets
    of one series (assembled as a series folder), a nibabel image, or a MONAI MetaTensor."""
    options = options or ReaderOptions()
    kind = _kind(image)
    if kind == "dicom series" and len(image) == 1:
        kind, image = "dicom", image[0]
    if kind == "dicom":
        return _read_dataset(_dataset_name(image, "<pydicom.Dataset>"), image, options)
    if kind == "dicom series":
        return _read_dataset_series(_series_name(image), list(image), options)
    if kind == "nibabel":
        return _read_nibabel(_nibabel_name(image), image, options)
    if kind == "monai":
        return _read_meta_tensor(_meta_tensor_name(image), image, options)
    raise TypeError(f"not an image in memory: a {type(image).__name__}")


def _dataset_name(dataset: pydicom.Dataset, default: str) -> str:
    """The file `dataset` was read from (pydicom keeps its name), else `default`."""
    filename = getattr(dataset, "filename", None)
    return str(filename) if isinstance(filename, (str, Path)) and str(filename) else default


def _series_name(datasets: list[pydicom.Dataset]) -> str:
    """The folder the series was read from, when its files share one, else `<pydicom.Dataset series>`."""
    names = [_dataset_name(dataset, "") for dataset in datasets]
    folders = {Path(name).parent for name in names}
    return str(folders.pop()) if all(names) and len(folders) == 1 else "<pydicom.Dataset series>"


@_typed_errors
def _read_dataset(name: str, dataset: pydicom.Dataset, options: ReaderOptions) -> MedicalImage:
    """One Dataset, by the DICOM file reader (its pixel, rescale, photometric, window and geometry rules)."""
    return DicomFileReader(options).get_data(DicomFile(Path(name), dataset, []))


@_typed_errors
def _read_dataset_series(name: str, datasets: list[pydicom.Dataset], options: ReaderOptions) -> MedicalImage:
    """The Datasets of one series, by the series reader (slices checked, sorted, assembled)."""
    uids = {str(_attribute(dataset, "SeriesInstanceUID", "")) for dataset in datasets}
    if len(uids) > 1:
        raise SeriesError(name, f"the {len(datasets)} data sets belong to {len(uids)} series: give those of one series")
    members = [
        (Path(_dataset_name(dataset, f"<pydicom.Dataset [{index}]>")), dataset)
        for index, dataset in enumerate(datasets)
    ]
    # what the series reader takes from a folder scan's summary
    summary = {"modality": str(_attribute(datasets[0], "Modality", "")), "files": len(datasets)}
    return DicomSeriesReader(options).get_data(DicomSeries(Path(name), summary, members, [], []))


def _image_filename(image: SpatialImage) -> str | None:
    filename = getattr(getattr(image, "file_map", {}).get("image"), "filename", None)
    return str(filename) if isinstance(filename, (str, Path)) and str(filename) else None


def _nibabel_name(image: SpatialImage) -> str:
    """The file nibabel read `image` from, else `<nibabel.Nifti1Image>` (its nibabel class)."""
    cls = next(cls.__name__ for cls in type(image).__mro__ if cls.__module__.startswith("nibabel"))
    return _image_filename(image) or f"<nibabel.{cls}>"


def _backing_file(image: SpatialImage) -> Path | None:
    """The NIfTI file whose voxels `image` reads from disk (as `nibabel.load` leaves them), if any."""
    filename = _image_filename(image)
    if filename is None or not nib.is_proxy(image.dataobj):
        return None
    path = Path(filename)
    return path if path.name.lower().endswith(NIFTI_SUFFIXES) and path.is_file() else None


@_typed_errors
def _read_nibabel(name: str, image: SpatialImage, options: ReaderOptions) -> MedicalImage:
    """A nibabel image by the NIfTI reader: the header checks of the file behind it (size, pixdim,
    4D volume choice), or of its own header when it was built in memory, then its voxels and affine."""
    reader = NiftiReader(options)
    file = _backing_file(image)
    if file is not None:
        raw = reader.read(file)
        raw.image = image
    else:
        raw = _checked_header(Path(name), image, options)
    return reader.get_data(raw)


def _checked_header(where: Path, image: SpatialImage, options: ReaderOptions) -> NiftiFile:
    """An image built in memory, checked as `NiftiReader.read` checks a header: greyscale voxels of 2 to
    4 dimensions, and for 4D the volume to read chosen."""
    shape = tuple(int(n) for n in image.shape)
    _check_voxel_layout(where, shape, np.dtype(image.get_data_dtype()))
    volumes = shape[3] if len(shape) >= 4 else 1
    if volumes > 1:
        if options.volume_index is None:
            raise UnsupportedImageError(
                where, f"4D image with {volumes} volumes; choose one with ReaderOptions(volume_index=N)"
            )
        if not 0 <= options.volume_index < volumes:
            raise UnsupportedImageError(where, f"volume_index {options.volume_index} outside 0..{volumes - 1}")
    return NiftiFile(where, image, shape, volumes)


def _meta_tensor_name(tensor) -> str:
    filename = tensor.meta.get("filename_or_obj")
    return str(filename) if isinstance(filename, (str, Path)) and str(filename) else "<monai.MetaTensor>"


@_typed_errors
def _read_meta_tensor(name: str, tensor, options: ReaderOptions) -> MedicalImage:
    """A MetaTensor as the nibabel image of its array and affine (MONAI keeps affines in RAS, like
    nibabel, unless its `space` says LPS), channel first (after `EnsureChannelFirst`) or not."""
    where = Path(name)
    if tensor.is_batch:
        raise UnsupportedImageError(where, "a batch of MetaTensors: give one image (monai.data.decollate_batch)")
    if tensor.pending_operations:
        raise UnsupportedImageError(where, "a MetaTensor with pending lazy transforms: apply them first")
    affine = np.asarray(tensor.affine, dtype=np.float64)
    if affine.shape != (4, 4):
        raise UnsupportedImageError(
            where, f"a MetaTensor with a {affine.shape} affine: only 3D affines are read (give 2D images as files)"
        )
    if str(tensor.meta.get("space", "RAS")).upper() == "LPS":
        affine = LPS_TO_RAS @ affine
    data = _channels_last(np.asarray(tensor.as_tensor().detach().cpu(), dtype=np.float32), tensor.meta, where)
    return _read_nibabel(name, nib.Nifti1Image(data, affine), options)


def _channels_last(data: np.ndarray, meta: dict, where: Path) -> np.ndarray:
    """(i, j, k), or (i, j, k, C) for several channels (volumes): a MetaTensor's array with its spatial
    axes in the affine's order, its channel axis last, as in a NIfTI file. MONAI's spatial axes are
    `spatial_shape` (what the reader loaded); the channel axis comes first (after `EnsureChannelFirst`),
    or last where `LoadImage` left a file's channels last."""
    spatial = meta.get("spatial_shape")
    spatial = None if spatial is None else tuple(int(n) for n in np.asarray(spatial).ravel())
    rank = len(spatial) if spatial else 3
    if data.ndim == rank:
        channels = data[..., None]
    elif data.ndim == rank + 1:
        as_loaded = spatial is not None and data.shape[:rank] == spatial and data.shape[1:] != spatial
        channels = data if as_loaded else np.moveaxis(data, 0, -1)
    else:
        raise UnsupportedImageError(where, f"a MetaTensor of shape {tuple(data.shape)} for {rank} spatial axes")
    while channels.ndim < 4:  # 2D images: a k axis of one slice
        channels = channels[..., None, :]
    return channels[..., 0] if channels.shape[-1] == 1 else channels


__all__ = ["InMemoryImage", "is_in_memory_image", "read_in_memory"]
